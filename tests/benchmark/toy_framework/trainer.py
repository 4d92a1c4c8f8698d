"""TEST STAND-IN for the toy framework's trainer: one JSON line per step into --sink (its own format, `toy-jsonl`).

Each line: {"toy_step", "seconds", "gen_s", "train_s", "sync_s", "n", "prompt_tok", "response_tok", "score", "h"}.
The step time depends on --target (target `b` is slower), so a comparison of two targets has something to show.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

SLOWER = {"a": 1.0, "b": 1.25}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sink", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--step-s", type=float, default=0.05)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--samples-per-prompt", type=int, default=4)
    parser.add_argument("--target", default="a")
    args = parser.parse_args()
    sink = Path(args.sink)
    sink.parent.mkdir(parents=True, exist_ok=True)
    samples = args.prompts * args.samples_per_prompt
    rng = random.Random(args.target)
    for step in range(1, args.steps + 1):
        seconds = args.step_s * SLOWER.get(args.target, 1.0) * rng.uniform(0.95, 1.05)
        time.sleep(seconds)
        line = {
            "toy_step": step,
            "seconds": seconds,
            "gen_s": seconds * 0.6,
            "train_s": seconds * 0.3,
            "sync_s": seconds * 0.05,
            "n": samples,
            "prompt_tok": samples * 100,
            "response_tok": samples * rng.randint(200, 300),
            "score": 0.1 + 0.01 * step,
            "h": 0.5,
        }
        with open(sink, "a") as f:
            f.write(json.dumps(line) + "\n")
        print(f"toy step {step}", flush=True)


if __name__ == "__main__":
    main()
