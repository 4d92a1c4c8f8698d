"""VERL 0.9.1's own checks accept every generated VERL cell and reject planted mistakes (on CPU).

The checks run VERL's real main_ppo (validate_config) and the v1 trainer constructors in a child interpreter that
holds VERL's import-time dependencies (frameworks/verl/own_checks.py says what is left out: Ray, TransferQueue
actors, model loading, SGLang). Without that interpreter the tests skip, unless MILES_BENCH_REQUIRE_VERL_CHECKS=1
(the README test command builds it and sets that), where its absence fails.
"""

import os
from pathlib import Path

import pytest
from scripts.benchmark.frameworks import registry

from scripts.benchmark.frameworks.verl.config import find_verl_root
from scripts.benchmark.frameworks.verl.data import converted_paths
from scripts.benchmark.frameworks.verl.launch import VerlData, build_verl_launch, overrides_of
from scripts.benchmark.frameworks.verl.own_checks import LEFT_OUT, find_check_python, run_verl_own_checks
from scripts.benchmark.plan.build import PlanOptions, build_plan
from scripts.benchmark.spec import BACKENDS, LAYOUTS, load_preset, preset_names, with_overrides

AR = "actor_rollout_ref"
CELLS = [(p, b, lay) for p in preset_names() for b in BACKENDS for lay in LAYOUTS]


def _overrides(preset: str, backend: str, layout: str) -> list[str]:
    spec = with_overrides(load_preset(preset), layout=layout)
    train, val = converted_paths(spec, "/out/data")
    return overrides_of(build_verl_launch(spec, backend, layout, VerlData(train, val)).argv)


def _train_only_plan(preset: str, layout: str) -> dict:
    spec = with_overrides(load_preset(preset), layout=layout, train_only=True)
    sides = registry.option_pair(compare_verl=True, miles_version=None)
    options = PlanOptions(backends=BACKENDS, layout=layout, output_dir=Path("/out"), sides=sides)
    return build_plan(spec, preset, options).data


def _train_only_cells() -> dict[str, tuple[list[str], dict]]:
    """Name -> (the VERL replay cell's overrides, its plan) for every preset x backend x layout in train-only mode."""
    cells = {}
    for preset in preset_names():
        for layout in LAYOUTS:
            if layout == "disaggregated" and load_preset(preset).batch.optimizer_steps_per_step > 1:
                continue  # refused at plan time (test_train_only.py): VERL would replay several batches per step
            plan = _train_only_plan(preset, layout)
            for cell in plan["cells"]:
                if cell["framework"] == "verl":
                    cells[f"train-only/{preset}/{cell['backend']}/{layout}"] = (overrides_of(cell["argv"]), plan)
    return cells


def _edit(overrides: list[str], *tokens: str) -> list[str]:
    keys = {t.partition("=")[0].lstrip("+") for t in tokens}
    return [o for o in overrides if o.partition("=")[0].lstrip("+") not in keys] + list(tokens)


SMOKE_SPLIT = ("smoke", "fsdp", "disaggregated")
PLANTED = {
    "parameter_sync_step x mini-batch != train batch": (
        SMOKE_SPLIT,
        ("trainer.v1.separate_async.parameter_sync_step=2",),
        "train_batch_size must equal parameter_sync_step",
    ),
    "naive weight-sync backend": (SMOKE_SPLIT, (f"{AR}.rollout.checkpoint_engine.backend=naive",), "nccl"),
    "off-policy threshold 0": (SMOKE_SPLIT, ("trainer.v1.sampler.max_off_policy_threshold=0",), "threshold"),
    "unknown key": (SMOKE_SPLIT, ("trainer.v1.separate_async.max_staleness=1",), "max_staleness"),
    "mini-batch larger than the step": (
        ("smoke", "fsdp", "colocate"),
        (
            f"{AR}.actor.use_dynamic_bsz=False",
            f"{AR}.actor.ppo_mini_batch_size=8",
            f"{AR}.actor.ppo_micro_batch_size_per_gpu=1",
        ),
        "ppo_mini_batch_size",
    ),
}


@pytest.fixture(scope="module")
def results():
    python, root = find_check_python(), find_verl_root()
    if python is None or root is None:
        why = (
            "no VERL check interpreter (.cache/verl-check-venv or VERL_CHECK_PYTHON)" if python is None else "no VERL"
        )
        if os.environ.get("MILES_BENCH_REQUIRE_VERL_CHECKS") == "1":
            pytest.fail(f"MILES_BENCH_REQUIRE_VERL_CHECKS=1 but {why}")
        pytest.skip(why)
    cells = [("/".join(cell), _overrides(*cell)) for cell in CELLS]
    cells += [(name, _edit(_overrides(*cell), *tokens)) for name, (cell, tokens, _) in PLANTED.items()]
    cells += [(name, overrides) for name, (overrides, _) in _train_only_cells().items()]
    return run_verl_own_checks(cells, root=root, python=python)


@pytest.mark.parametrize("preset,backend,layout", CELLS)
def test_every_generated_cell_passes_verls_own_checks(results, preset, backend, layout):
    result = results[f"{preset}/{backend}/{layout}"]
    assert result["status"] == "accepted", result
    assert result["validate_config_passed"] and result["rollout_config"] == "RolloutConfig"
    spec = load_preset(preset)
    if layout == "colocate":
        assert (result["trainer_class"], result["replay_buffer"]) == ("PPOTrainerSync", "ReplayBuffer")
        assert result["parameter_sync_step"] == 1
    else:
        assert (result["trainer_class"], result["replay_buffer"]) == ("PPOTrainerSeparateAsync", "ReplayBufferAsync")
        assert result["parameter_sync_step"] == spec.batch.optimizer_steps_per_step
    assert result["left_out"] == list(LEFT_OUT)


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_mistakes_are_rejected_by_verl(results, name):
    result, expected = results[name], PLANTED[name][2]
    assert result["status"] == "rejected" and expected in result["error"], result


TRAIN_ONLY_CELLS = [
    (p, b, lay) for p, b, lay in CELLS if lay == "colocate" or load_preset(p).batch.optimizer_steps_per_step == 1
]


@pytest.mark.parametrize("preset,backend,layout", TRAIN_ONLY_CELLS)
def test_every_train_only_replay_cell_passes_verls_own_checks_and_loads_the_converted_recording(
    results, preset, backend, layout
):
    """The replay cell's skip.rollout_tq is VERL's RolloutTqSkip with action cache on every step, and the folder VERL
    loads recorded batches from is the one the plan's conversion step writes the recording into."""
    name = f"train-only/{preset}/{backend}/{layout}"
    result, plan = results[name], _train_only_cells()[name][1]
    assert result["status"] == "accepted", result
    spec = load_preset(preset)
    conversion = next(step for step in plan["prepare"] if step["name"] == f"convert-recording-verl-{backend}")
    target = conversion["argv"][conversion["argv"].index("--target") + 1]
    sync = 1 if layout == "colocate" else spec.batch.optimizer_steps_per_step
    assert result["rollout_tq"] == {
        "class": "RolloutTqSkip",
        "enabled": True,
        "action": "cache",
        "steps": list(range(1, spec.run.num_steps + 1)),
        "parameter_sync_step": sync,
        "project_dump_dir": target,
    }
    assert conversion["creates"] == f"{target}/{spec.run.num_steps}/{sync - 1}/meta.json"
