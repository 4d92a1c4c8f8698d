"""Which Miles a plan's launches target, and what differs between the Miles versions the harness knows.

- `MILES_TARGETS`: name -> `MilesTarget`; `DEFAULT_MILES_TARGET` is the Miles the flag inventory (miles-cli.json)
  was taken from, the one a GPU node runs. `MILES_RELEASE` is the PyPI release (`miles-rl`) whose own parser the
  tests run on every generated launch.
- `target_problems(target, backend)`: why a cell cannot be planned for that Miles (empty when it can).

What differs (each read in the release's own code, and held by tests/benchmark/test_miles_parser.py):
- `--save-debug-event-data` (the event log the harness reads as its Miles sink) does not exist in miles-rl 0.0.2:
  its cells are planned without it and record no sink, so they can be checked but not measured.
- The benchmark tracking backend comes with the patch series (upstream/miles): the in-tree target (31f1ca9 with the
  series applied) has it and its cells use it as their sink; miles-rl 0.0.2 has not, its cells keep the stdout sink.
- miles-rl 0.0.2 refuses `--train-backend fsdp` outside its own CI tests (parse_args raises unless --ci-test, which
  turns on per-step checks a benchmark must not time): FSDP cells are not planned for it.
- miles-rl 0.0.2 has no `--fully-async` (nor miles/rollout/fully_async_rollout.py; it knows --max-weight-staleness and
  --pause-generation-mode): the continuous schedule (spec.placement.async_loop.schedule) is not planned for it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MilesTarget:
    name: str
    source: str
    sglang_version: str | None
    """The SGLang the target bundles (its --sglang-* flag spellings), or None: the spec's rollout.sglang_versions."""
    fsdp: bool
    """`--train-backend fsdp` is accepted outside Miles's CI tests."""
    fully_async: bool = True
    """train_async.py --fully-async exists (the continuous schedule)."""
    tracking_backend: bool = False
    """The benchmark tracking backend (miles/utils/bench_tracking.py, patch series) is in this Miles: its cells read
    the backend's files (sink `miles-tracking`); without it the job's stdout (sink `miles-stdout`)."""


MILES_RELEASE = "0.0.2"
DEFAULT_MILES_TARGET = "31f1ca9"
MILES_TARGETS = {
    DEFAULT_MILES_TARGET: MilesTarget(
        name=DEFAULT_MILES_TARGET,
        source="radixark/miles commit 31f1ca9 (2026-08-21) with upstream/miles/*.patch, the source of miles-cli.json",
        sglang_version=None,
        fsdp=True,
        tracking_backend=True,
    ),
    MILES_RELEASE: MilesTarget(
        name=MILES_RELEASE,
        source="miles-rl 0.0.2 from PyPI (2026-05)",
        sglang_version="0.5.12",  # its bundled SGLang predates the 0.5.14 rename (no cuda_graph_max_bs_decode)
        fsdp=False,
        fully_async=False,
    ),
}


def miles_target(name: str) -> MilesTarget:
    if name not in MILES_TARGETS:
        raise ValueError(f"unknown Miles target {name!r}: one of {sorted(MILES_TARGETS)}")
    return MILES_TARGETS[name]


def target_problems(target: MilesTarget, backend: str) -> list[str]:
    if backend == "fsdp" and not target.fsdp:
        return [
            f"Miles {target.name} refuses --train-backend fsdp outside its CI tests (its parse_args raises unless "
            "--ci-test, which adds per-step checks); plan megatron, or target a newer Miles"
        ]
    return []


def schedule_problems(target: MilesTarget, schedule: str) -> list[str]:
    if schedule == "continuous" and not target.fully_async:
        return [
            f"placement.async_loop.schedule=continuous: Miles {target.name} has no --fully-async (its parser "
            "refuses it); use schedule drain, or target a newer Miles"
        ]
    return []
