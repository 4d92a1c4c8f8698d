"""The toy framework's `FrameworkAdapter`: launch, parity knobs, reader and learning keys, nothing else."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from scripts.benchmark.frameworks.adapter import AdapterDefaults, LaunchContext
from scripts.benchmark.frameworks.launch import BENCH_CELL_DIR, FrameworkLaunch
from scripts.benchmark.frameworks.learning_signals import learning_from_keys, set_learning
from scripts.benchmark.frameworks.native_events import NoStepsError
from scripts.benchmark.spec import BenchmarkSpec

from miles.utils.bench_metrics import PHASES, RunContext, StepRecord

TRAINER = Path(__file__).with_name("trainer.py")
SINK = f"{BENCH_CELL_DIR}/sink/toy.jsonl"
STEP_S = 0.05


class ToyAdapter(AdapterDefaults):
    name = "toy"
    label = "Toy"
    sink_formats = ("toy-jsonl",)
    learning_keys = {"reward_mean": ("score",), "entropy": ("h",)}

    def default_target(self) -> str | None:
        return "a"

    def targets(self) -> tuple[str, ...]:
        return ("a", "b")

    def build_launch(self, spec: BenchmarkSpec, backend: str, layout: str, ctx: LaunchContext) -> FrameworkLaunch:
        argv = [sys.executable, str(TRAINER), "--sink", SINK, "--steps", str(spec.run.num_steps)]
        argv += ["--step-s", str(STEP_S), "--prompts", str(spec.batch.prompts_per_step)]
        argv += ["--samples-per-prompt", str(spec.batch.samples_per_prompt)]
        argv += ["--target", ctx.side.target or "a"]
        return FrameworkLaunch(
            framework=self.name,
            backend=backend,
            layout=layout,
            argv=argv,
            launch_argv=list(argv),
            env={"PYTHONUNBUFFERED": "1"},
            sink={"format": "toy-jsonl", "path": SINK},
        )

    def parity_knobs(
        self, argv: list[str], backend: str, prepare_argv: list[str] | None, target: str | None = None
    ) -> dict[str, Any]:
        """Knobs of frameworks/knobs.py, in their declared types (numbers here)."""
        return {
            knob: int(argv[argv.index(flag) + 1])
            for knob, flag in (
                ("steps", "--steps"),
                ("prompts_per_step", "--prompts"),
                ("samples_per_prompt", "--samples-per-prompt"),
            )
        }

    def read_sink(self, paths: list[Path], ctx: RunContext) -> list[StepRecord]:
        lines = [json.loads(line) for path in paths for line in path.read_text().splitlines() if line.strip()]
        if not lines:
            raise NoStepsError(f"no toy steps in {', '.join(map(str, paths))}")
        records = []
        for line in lines:
            phases = dict.fromkeys(PHASES)
            phases.update(generate=line["gen_s"], rollout_wait=line["gen_s"], train=line["train_s"])
            phases.update(weight_sync=line["sync_s"], old_logprob=0.0, ref_logprob=0.0)
            phases["other"] = line["seconds"] - line["gen_s"] - line["train_s"] - line["sync_s"]
            record = StepRecord(
                framework=self.name,
                step=line["toy_step"],
                step_time_s=line["seconds"],
                phases_s=phases,
                tokens={"prompt": line["prompt_tok"], "response": line["response_tok"]},
                samples=line["n"],
                raw=line,
            )
            records.append(set_learning(record, learning_from_keys(line, self.learning_keys), []))
        return records


ADAPTER = ToyAdapter()
