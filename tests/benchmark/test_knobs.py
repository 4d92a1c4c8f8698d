"""The typed knob model (frameworks/knobs.py): every knob both parsers read back from every shipped launch is
declared and of its declared type, so a spelling that drifts in one parser fails here and at plan time, not as a
mismatch at night; a value outside its knob's type is told apart from one inside it; and the knob list of
docs/benchmark/adding-a-framework.md is the model's.

Regenerate the page's list: MILES_BENCH_UPDATE_GOLDEN=1 python -m pytest -q tests/benchmark/test_knobs.py
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from scripts.benchmark.frameworks import registry
from scripts.benchmark.frameworks.knobs import BY_NAME, KNOBS, knob_list_markdown
from scripts.benchmark.frameworks.miles.launch import build_miles_launch
from scripts.benchmark.frameworks.miles.versions import MILES_RELEASE, miles_target
from scripts.benchmark.frameworks.verl.data import converted_paths, prepare_step
from scripts.benchmark.frameworks.verl.launch import VerlData, build_verl_launch
from scripts.benchmark.spec import BACKENDS, BenchmarkSpec, load_preset, preset_names, with_overrides

PAGE = Path(__file__).resolve().parents[2] / "docs" / "benchmark" / "adding-a-framework.md"
LIST = re.compile(r"(<!-- knobs:start -->\n)(.*?)(<!-- knobs:end -->)", re.DOTALL)


def _specs():
    for preset in preset_names():
        for layout, schedule in (("colocate", "drain"), ("disaggregated", "drain"), ("disaggregated", "continuous")):
            data = with_overrides(load_preset(preset), layout=layout).model_dump(mode="json")
            data["placement"]["async_loop"]["schedule"] = schedule
            yield pytest.param(BenchmarkSpec.model_validate(data), layout, id=f"{preset}-{layout}-{schedule}")


def _badly_typed(knobs: dict) -> dict:
    return {name: BY_NAME[name].problem(value) if name in BY_NAME else "not declared" for name, value in knobs.items()}


@pytest.mark.parametrize("spec,layout", list(_specs()))
def test_both_parsers_return_declared_knobs_of_their_declared_types(spec, layout):
    train, val = converted_paths(spec, "/out/data")
    prepare = prepare_step(spec, "/out/data", "run.py")["argv"]
    miles, verl = registry.get("miles"), registry.get("verl")
    for backend in BACKENDS:
        parsed = {
            "miles": miles.parity_knobs(build_miles_launch(spec, backend, layout).argv, backend, None, None),
            "verl": verl.parity_knobs(
                build_verl_launch(spec, backend, layout, VerlData(train, val)).argv, backend, prepare
            ),
        }
        if backend == "megatron" and spec.placement.async_loop.schedule == "drain":
            argv = build_miles_launch(spec, backend, layout, target=miles_target(MILES_RELEASE)).argv
            parsed["miles 0.0.2"] = miles.parity_knobs(argv, backend, None, MILES_RELEASE)
        for side, knobs in parsed.items():
            problems = {name: why for name, why in _badly_typed(knobs).items() if why}
            assert not problems, (side, backend, problems)


def _miles_read(values: dict[str, str], switches: tuple[str, ...] = ()) -> dict:
    """Miles's knobs of the smoke preset's disaggregated Megatron launch (train_async.py) with these flags set."""
    argv = build_miles_launch(load_preset("smoke"), "megatron", "disaggregated").argv
    for flag, value in values.items():
        argv = argv[: argv.index(flag)] + argv[argv.index(flag) + 2 :] if flag in argv else argv
        argv += [flag, value]
    return registry.get("miles").parity_knobs(argv + list(switches), "megatron", None, None)


@pytest.mark.parametrize(
    "values,switches,knob,value",
    [
        ({"--prompt-data": "/d/all.jsonl"}, (), "prompt_rows", "all.jsonl (whole file)"),
        ({"--rm-type": "deepscaler"}, (), "reward_scorer", "deepscaler, key score (own scorer)"),
        ({"--sglang-cuda-graph-backend-prefill": "tc"}, (), "prefill_cuda_graphs", "tc (set by the launch)"),
        ({"--pause-generation-mode": "in_place"}, ("--fully-async",), "partial_rollout", None),
    ],
)
def test_the_miles_parsers_rarer_branches_spell_declared_values(values, switches, knob, value):
    read = _miles_read(values, switches)
    assert value is None or read[knob] == value
    assert BY_NAME[knob].problem(read[knob]) is None, read[knob]


def test_a_value_no_spelling_covers_is_refused_with_the_value():
    read = _miles_read({"--pause-generation-mode": "freeze"}, ("--fully-async",))
    assert read["partial_rollout"] == "freeze" and BY_NAME["partial_rollout"].problem("freeze").startswith(
        "not one of"
    )


@pytest.mark.parametrize(
    "knob,value,problem",
    [
        ("layout", "colocated", None),
        ("layout", "colocate", "not one of 'colocated', 'disaggregated'"),
        ("dynamic_batching", True, None),
        ("dynamic_batching", "true", "not one of true, false"),
        ("dynamic_batching", 1, "not one of true, false"),
        ("prompt_order", "shuffled (seed 7)", None),
        ("prompt_order", "shuffled", "not one of 'file order', 'shuffled (seed {})'"),
        ("lr", 1e-6, None),
        ("lr", "1e-6", "not a number"),
        ("lr", True, "not a number"),
        ("lr", float("nan"), "not a number"),
        ("mem_fraction", "sglang auto", None),
        ("mem_fraction", "auto", "not a number nor one of 'sglang auto'"),
        ("dropout", [0.0, 0.1], None),
        ("dropout", ["0.0"], "not a number"),
        ("external_trackers", ["wandb"], None),
        ("metric_sink", "", "not text"),
        ("metric_sink", 3, "not text"),
        ("metric_sink", None, "not text"),
    ],
)
def test_a_value_is_of_its_knobs_type_or_told_why_not(knob, value, problem):
    assert BY_NAME[knob].problem(value) == problem


def test_every_knob_is_declared_once_with_its_cost_and_type():
    assert len(BY_NAME) == len(KNOBS)
    for knob in KNOBS:
        assert knob.cost and knob.group, knob.name
        assert knob.kind != "enum" or knob.spellings, knob.name
        assert (knob.kind == "note") == bool(knob.why_free), knob.name
    groups = [knob.group for knob in KNOBS]
    assert groups == sorted(groups, key=groups.index), "a group's knobs are declared together, in table order"


def test_the_pages_knob_list_is_the_models():
    text = PAGE.read_text(encoding="utf-8")
    match = LIST.search(text)
    assert match, f"{PAGE} has no <!-- knobs:start --> ... <!-- knobs:end --> block"
    if os.environ.get("MILES_BENCH_UPDATE_GOLDEN") == "1":
        PAGE.write_text(LIST.sub(lambda m: m[1] + knob_list_markdown() + "\n" + m[3], text), encoding="utf-8")
        match = LIST.search(PAGE.read_text(encoding="utf-8"))
    assert (
        match[2] == knob_list_markdown() + "\n"
    ), f"{PAGE}'s knob list differs from frameworks/knobs.py: regenerate it"
