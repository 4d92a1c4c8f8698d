"""Miles vs VERL throughput benchmark: plan matched launches, run them, read both metric sinks, report.

Prerequisites: for --dry-run nothing but this checkout's Python dependencies (pip install -e ".[verl]"). To run for
real: a GPU node (or Ray cluster) with Miles and/or VERL installed; see docs/benchmark.md.

Examples:
    python scripts/benchmark/run.py --backend all --compare-verl --preset qwen3-1.7b-base --output-dir out --dry-run
    python scripts/benchmark/run.py flops --model qwen3-4b --seq-lens 1024,4096 --json
    python scripts/benchmark/run.py report out

Each subcommand lives in scripts/benchmark/commands/<name>.py and exposes register(app); heavy imports happen inside
the command bodies so that --help stays fast.
"""

import sys
import types
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parents[2]
if str(_REPO_ROOT) not in sys.path:  # run as a script from anywhere: make `scripts.` and `miles.` importable
    sys.path.insert(0, str(_REPO_ROOT))
# This checkout's `scripts` is a namespace package, which loses to any regular `scripts` package on sys.path (VERL's
# wheel installs one): bind the name to this checkout's folder before anything imports it.
if str(_REPO_ROOT / "scripts") not in getattr(sys.modules.get("scripts"), "__path__", []):
    sys.modules["scripts"] = types.ModuleType("scripts")
    sys.modules["scripts"].__path__ = [str(_REPO_ROOT / "scripts")]

import typer  # noqa: E402

from scripts.benchmark.commands import (  # noqa: E402
    ab,
    bisect,
    calibrate,
    convert_data,
    execute,
    history,
    metrics,
    plan,
    prepare_recording,
    recording,
    report,
    simulate_check,
)
from scripts.benchmark.errors import wrap_commands  # noqa: E402

# Order is the order of `--help`. The plan command owns the app callback (the main job without a subcommand).
COMMANDS = (
    plan,
    execute,
    convert_data,
    recording,
    prepare_recording,
    metrics,
    report,
    history,
    ab,
    bisect,
    simulate_check,
    calibrate,
)


def build_app() -> typer.Typer:
    # One help style for every command: click's plain layout, each default shown once as [default: ...].
    app = typer.Typer(
        add_completion=False,
        no_args_is_help=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"show_default": True},
    )
    for command in COMMANDS:
        command.register(app)
    wrap_commands(app)
    if app.registered_callback is None:  # keep subcommands addressable by name even when only one is registered
        app.callback()(lambda: None)
    return app


def main() -> None:
    build_app()()


if __name__ == "__main__":
    main()
