"""Benchmark (not a test): what `run.py report` costs on generated run folders, and how fast `run.py --help` is.

- Writes run folders with validation_generator.write_generated_folder: 4 backend/layout pairs (8 cells) of one
  repeat of 10,000 steps, of one repeat of 24 steps, and of 3 repeats of 24 steps (the default), then runs
  `python scripts/benchmark/run.py report DIR --quiet` on each `--runs` times in a fresh process pinned to
  `--cores` CPUs, and prints a markdown table: median wall time, median CPU time (user + sys) and the largest peak
  resident memory of the runs.
- Run: `python -m tests.benchmark.bench_report_cost` from the repository root (about a minute on 2 cores).

Caveats:
- Wall time depends on what else the machine runs; the CPU time column is the steadier figure, and the load
  average is printed with the table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.benchmark.validation_generator import write_generated_folder

REPO_ROOT = Path(__file__).resolve().parents[2]
PAIRS = [("fsdp", "colocate"), ("fsdp", "disaggregated"), ("megatron", "colocate"), ("megatron", "disaggregated")]
CASES = (("8 cells x 1 repeat x 10,000 steps", 10_000, 1), ("8 cells x 1 repeat x 24 steps", 24, 1))
CASES += (("8 cells x 3 repeats x 24 steps", 24, 3),)


def _pin(cores: int):
    def pin() -> None:
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[:cores]))

    return pin


def measure(argv: list[str], cores: int) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS in MB) of one child process (os.wait4 gives that child's own usage)."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, preexec_fn=_pin(cores))
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {child.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    run_py = [sys.executable, str(REPO_ROOT / "scripts/benchmark/run.py")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, steps, repeats in CASES:
            folder = write_generated_folder(
                Path(tmp) / f"{steps}x{repeats}", steps=steps, pairs=PAIRS, repeats=repeats
            )
            runs = [measure([*run_py, "report", str(folder), "--quiet"], args.cores) for _ in range(args.runs)]
            rows.append((f"`report`, {name}", runs))
        rows.append(("`run.py --help`", [measure([*run_py, "--help"], args.cores) for _ in range(args.runs)]))
    load = os.getloadavg()
    print(f"{args.runs} runs each, pinned to {args.cores} cores; load average {load[0]:.1f} {load[1]:.1f}.")
    print("Peak memory: the largest resident set of the report process over the runs (ru_maxrss).\n")
    print("| what | wall (median) | CPU user+sys (median) | peak RSS |")
    print("|---|---|---|---|")
    for name, runs in rows:
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        print(f"| {name} | {wall:.2f} s | {cpu:.2f} s | {max(r[2] for r in runs):.0f} MB |")


if __name__ == "__main__":
    main()
