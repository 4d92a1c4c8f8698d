"""Miles's flag inventory from Miles's own parsers: every option string train.py accepts per backend, with its
default and choices, in the shape flags.py reads (`common`, `fsdp_only`, `megatron_only`; `per_backend` where the
two backends define a common flag differently).

Inside a Miles checkout the inventory is this checkout's parser, so it is never out of date; outside one (this
project), frameworks/miles/miles-cli.json is the same inventory, generated in Miles's environment by this module:

    python -m scripts.benchmark.frameworks.miles.cli_inventory --output scripts/benchmark/frameworks/miles/miles-cli.json

run from a Miles checkout with the benchmark applied, Megatron-LM on PYTHONPATH (as Miles's CI has it).

- `from_parsers()`: in this process: Miles's FSDP parser (`build_fsdp_parser`) and Megatron's (Miles's
  `parse_args` path: Megatron's `parse_args` with Miles's extra-args provider, stopped where it would parse), each
  with Miles's `get_miles_extra_args_provider()`; defaults as the parser resolves them (`get_default`).
- `parser_inventory(miles_root)`: the same from a child process of this interpreter (the imports are heavy and set
  global state), kept in the user's cache folder with the size and mtime of every source file the child imported;
  any change to one of them builds it again. Raises `InventoryUnavailable` (why) when Miles cannot be imported.
"""

from __future__ import annotations

import argparse
import enum
import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

REPO_ROOT = Path(__file__).resolve().parents[4]
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "miles-bench"
FORMAT = "miles-cli-inventory-v2"


class InventoryUnavailable(RuntimeError):
    """Miles's parser cannot be built by this interpreter (the message says why and what to do)."""


class _Stop(Exception):
    pass


def _jsonable(value):
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, enum.Enum):  # as the command line spells it (an enum-typed flag parses member names)
        return value.name
    return getattr(value, "__name__", None) or str(value)


def _flags(parser: argparse.ArgumentParser) -> dict[str, dict]:
    flags = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        choices = _jsonable(list(action.choices)) if action.choices is not None else None
        entry = {"default": _jsonable(parser.get_default(action.dest)), "choices": choices}
        for option in action.option_strings:
            flags[option] = entry
    return flags


def _megatron_parser(provider) -> argparse.ArgumentParser:
    """Megatron's parser as Miles's parse_args builds it, taken at the moment it would parse sys.argv."""
    from miles.backends.megatron_utils.arguments import parse_args

    captured = []

    def stop(self, *args, **kwargs):
        captured.append(self)
        raise _Stop

    with mock.patch.object(argparse.ArgumentParser, "parse_args", stop):
        try:
            parse_args(extra_args_provider=provider)
        except _Stop:
            pass
    return captured[0]


def from_parsers() -> dict:
    from miles.backends.fsdp_utils.arguments import build_fsdp_parser
    from miles.utils.arguments import get_miles_extra_args_provider

    # a launch's one required flag, so that Miles's provider also adds its default rollout function's own flags
    with mock.patch.object(sys, "argv", ["train.py", "--rollout-batch-size", "1"]):
        fsdp = _flags(build_fsdp_parser(get_miles_extra_args_provider()))
        megatron = _flags(_megatron_parser(get_miles_extra_args_provider()))
    common = {}
    for flag in sorted(fsdp.keys() & megatron.keys()):
        both = {"fsdp": fsdp[flag], "megatron": megatron[flag]}
        common[flag] = fsdp[flag] if fsdp[flag] == megatron[flag] else {**fsdp[flag], "per_backend": both}
    return {
        "format": FORMAT,
        "common": common,
        "fsdp_only": {flag: fsdp[flag] for flag in sorted(fsdp.keys() - megatron.keys())},
        "megatron_only": {flag: megatron[flag] for flag in sorted(megatron.keys() - fsdp.keys())},
    }


def _stamp(path: str) -> list[int]:
    stat = os.stat(path)
    return [stat.st_size, stat.st_mtime_ns]


def _loaded_sources() -> dict[str, list[int]]:
    files = {getattr(module, "__file__", None) for module in list(sys.modules.values())}
    return {path: _stamp(path) for path in sorted(f for f in files if f and os.path.isfile(f))}


def _cache_path(miles_root: Path) -> Path:
    key = hashlib.sha256(f"{Path(miles_root).resolve()}\0{sys.executable}".encode()).hexdigest()[:16]
    return CACHE_DIR / f"cli-inventory-{key}.json"


def _fresh(cached: dict) -> bool:
    try:
        return cached.get("format") == FORMAT and all(_stamp(p) == s for p, s in cached["sources"].items())
    except (OSError, KeyError, AttributeError, TypeError):
        return False


def parser_inventory(miles_root: Path = REPO_ROOT) -> dict:
    path = _cache_path(miles_root)
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    if _fresh(cached):
        return cached["inventory"]
    path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(miles_root), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, str(Path(__file__).resolve()), "--cache", str(path)]  # by path: `scripts` may be taken
    done = subprocess.run(command, cwd=miles_root, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise InventoryUnavailable(
            f"Miles's flag inventory comes from Miles's own parser, which {sys.executable} cannot build in "
            f"{miles_root} ({last}): run in Miles's environment (Megatron-LM on PYTHONPATH), or point "
            "MILES_CLI_INVENTORY at an inventory this module generated"
        )
    return json.loads(path.read_text())["inventory"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, help="write the inventory here (default: stdout)")
    parser.add_argument("--cache", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    inventory = from_parsers()
    if args.cache:
        partial = args.cache.with_name(f"{args.cache.name}.{os.getpid()}")
        partial.write_text(json.dumps({"format": FORMAT, "sources": _loaded_sources(), "inventory": inventory}))
        os.replace(partial, args.cache)
        return 0
    text = json.dumps(inventory, indent=1, sort_keys=True) + "\n"
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
