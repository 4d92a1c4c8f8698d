"""Check a Miles train.py argv against the flags Miles accepts for its backend.

- `load_inventory(path=None)`: every train.py flag per backend, with its default and choices (backend accepts =
  common + <backend>_only), from Miles's own parsers (cli_inventory.py): inside a Miles checkout this checkout's
  parser; outside one the inventory generated from it, frameworks/miles/miles-cli.json (or env MILES_CLI_INVENTORY).
- `flag_problems(argv, backend, inventory) -> list[str]`: flags unknown to that backend, and values outside a flag's
  declared choices. `check_miles_argv` raises ValueError with all of them.
- `check_with_miles_parser(argv)`: where Miles itself is importable, also parse with Miles's own flag provider
  (argparse + get_miles_extra_args_provider + parse_known_args); returns None when it is not.

Caveats:
- The parser branch cannot run on a machine without Miles (and its sglang/ray/torch imports); it only sees the Miles
  provider's flags, so backend-only flags (Megatron's or FSDPArgs') are judged by the inventory alone.
- The FSDP parser allows unique-prefix abbreviations; this check does not: the harness emits full names only.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from functools import lru_cache
from pathlib import Path

GENERATED_INVENTORY = Path(__file__).resolve().parent / "miles-cli.json"
"""Out of tree only (never copied into Miles, whose parser answers there); cli_inventory.py regenerates it."""


@lru_cache(maxsize=4)
def _read_inventory(path: str) -> dict:
    return json.loads(Path(path).read_text())


@lru_cache(maxsize=1)
def _parser_inventory() -> dict:
    from scripts.benchmark.frameworks.miles.cli_inventory import parser_inventory

    return parser_inventory()


def load_inventory(path: str | Path | None = None) -> dict:
    explicit = path or os.environ.get("MILES_CLI_INVENTORY")
    if explicit:
        return _read_inventory(str(explicit))
    return _read_inventory(str(GENERATED_INVENTORY)) if GENERATED_INVENTORY.is_file() else _parser_inventory()


def backend_flags(inventory: dict, backend: str) -> dict[str, dict]:
    return {**inventory["common"], **inventory[f"{backend}_only"]}


def flag_default(inventory: dict, backend: str, flag: str):
    """The default Miles applies for `backend` when `flag` is absent (per-backend defaults win)."""
    entry = backend_flags(inventory, backend).get(flag)
    if entry is None:
        raise KeyError(f"{flag} does not exist for --train-backend {backend}")
    per_backend = (entry.get("per_backend") or {}).get(backend)
    return (per_backend or entry)["default"]


def split_flags(argv: list[str]) -> list[tuple[str, list[str]]]:
    """[(--flag, [values...])] for the train.py / train_async.py part of argv (everything after the script path;
    both scripts parse the same arguments)."""
    start = next((i + 1 for i, token in enumerate(argv) if token.endswith(("train.py", "train_async.py"))), 0)
    pairs: list[tuple[str, list[str]]] = []
    for token in argv[start:]:
        if token.startswith("--"):
            pairs.append((token, []))
        elif pairs:
            pairs[-1][1].append(token)
        else:
            pairs.append(("<positional>", [token]))
    return pairs


def flag_problems(argv: list[str], backend: str, inventory: dict | None = None) -> list[str]:
    inventory = inventory or load_inventory()
    known = backend_flags(inventory, backend)
    problems = []
    for flag, values in split_flags(argv):
        entry = known.get(flag)
        if entry is None:
            other = "megatron" if backend == "fsdp" else "fsdp"
            hint = f" (it exists only for --train-backend {other})" if flag in inventory[f"{other}_only"] else ""
            problems.append(f"{flag} is not a train.py flag for --train-backend {backend}{hint}")
            continue
        choices = (((entry.get("per_backend") or {}).get(backend)) or entry).get("choices")
        if choices and values and values[0] not in [str(choice) for choice in choices]:
            problems.append(f"{flag} {values[0]}: not one of {choices}")
    return problems


def check_miles_argv(argv: list[str], backend: str, inventory: dict | None = None) -> None:
    problems = flag_problems(argv, backend, inventory)
    if problems:
        raise ValueError(f"Miles {backend} launch has invalid flags: " + "; ".join(problems))


def check_with_miles_parser(argv: list[str], backend: str, inventory: dict | None = None) -> list[str] | None:
    """Unknown flags according to Miles's own provider, or None when Miles is not importable here."""
    if importlib.util.find_spec("miles") is None or importlib.util.find_spec("miles.utils.arguments") is None:
        return None
    from miles.utils.arguments import get_miles_extra_args_provider

    only = set((inventory or load_inventory())[f"{backend}_only"])
    tokens = [token for pair in split_flags(argv) for token in (pair[0], *pair[1]) if pair[0] not in only]
    parser = argparse.ArgumentParser(allow_abbrev=False)
    saved, sys.argv = sys.argv, ["train.py", *tokens]
    try:
        get_miles_extra_args_provider()(parser)
        _, unknown = parser.parse_known_args(tokens)
    finally:
        sys.argv = saved
    return [token for token in unknown if token.startswith("--")]
