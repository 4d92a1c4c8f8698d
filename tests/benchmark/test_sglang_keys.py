"""SGLang keys spelled for the SGLang each framework runs; preflight refuses a key the installed SGLang rejects."""

import ast
import importlib.metadata
import importlib.util
from pathlib import Path

import pytest

from scripts.benchmark.frameworks.miles.launch import build_miles_launch, miles_cuda_graph_flag
from scripts.benchmark.frameworks.sglang_version import (
    cuda_graph_max_bs_key,
    graph_key_in,
    prefill_graphs_off_key,
    version_tuple,
)
from scripts.benchmark.frameworks.verl.launch import VerlData, build_verl_launch
from scripts.benchmark.runner.environment_record import build_environment_record
from scripts.benchmark.runner.sglang_check import installed_sglang_version, sglang_key_problems
from scripts.benchmark.spec import BenchmarkSpec, load_preset


def _cells(verl_version="0.5.12", miles_version="0.5.16"):
    data = load_preset("qwen3-30b-a3b").model_dump()
    data["rollout"]["sglang_versions"] = {"verl": verl_version, "miles": miles_version}
    spec = BenchmarkSpec.model_validate(data)
    miles = build_miles_launch(spec, "megatron", "colocate")
    verl = build_verl_launch(spec, "megatron", "colocate", VerlData("/d/train.parquet", "/d/val.parquet"))
    return [
        {"id": "miles-megatron-colocate", "framework": "miles", "argv": miles.argv},
        {"id": "verl-megatron-colocate", "framework": "verl", "argv": verl.argv},
    ]


@pytest.mark.parametrize(
    "version,key",
    [("0.5.12", "cuda_graph_max_bs"), ("0.5.13", "cuda_graph_max_bs"), ("0.5.14", "cuda_graph_max_bs_decode"),
     ("0.5.16rc1", "cuda_graph_max_bs_decode"), ("v0.6.0", "cuda_graph_max_bs_decode")],
)  # fmt: skip
def test_the_key_follows_the_rename_in_0_5_14(version, key):
    assert cuda_graph_max_bs_key(version) == key
    assert miles_cuda_graph_flag(version) == "--sglang-" + key.replace("_", "-")


@pytest.mark.parametrize(
    "version,key",
    [("0.5.12", "disable_piecewise_cuda_graph"), ("0.5.13", "disable_piecewise_cuda_graph"),
     ("0.5.14", "disable_prefill_cuda_graph"), ("0.5.16", "disable_prefill_cuda_graph")],
)  # fmt: skip
def test_the_prefill_graph_switch_follows_the_same_rename(version, key):
    """Read from the released wheels: up to 0.5.13 ServerArgs has disable_piecewise_cuda_graph (piecewise graphs
    were the only prefill graphs), from 0.5.14 disable_prefill_cuda_graph beside per-phase backends."""
    assert prefill_graphs_off_key(version) == key
    assert graph_key_in("disable_prefill_cuda_graph", version) == graph_key_in("disable_piecewise_cuda_graph", version)
    assert graph_key_in("chunked_prefill_size", version) == "chunked_prefill_size"


def _installed_server_args_fields() -> tuple[str, set[str]]:
    """The installed SGLang's version and ServerArgs fields, read from its source (sglang is not imported)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or spec.origin is None:
        pytest.skip("no sglang installed for this interpreter (the Miles overlay environment has one)")
    tree = ast.parse((Path(spec.origin).parent / "srt" / "server_args.py").read_text(encoding="utf-8"))
    server_args = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    fields = {n.target.id for n in server_args.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    return importlib.metadata.version("sglang"), fields


def test_the_installed_sglang_has_the_fields_spelled_for_its_version():
    version, fields = _installed_server_args_fields()
    spelled = {cuda_graph_max_bs_key(version), prefill_graphs_off_key(version)}
    assert spelled <= fields
    other = {
        "cuda_graph_max_bs",
        "cuda_graph_max_bs_decode",
        "disable_piecewise_cuda_graph",
        "disable_prefill_cuda_graph",
    }
    assert not (other - spelled) & fields


def test_a_version_without_numbers_is_refused():
    with pytest.raises(ValueError, match="not a version number"):
        version_tuple("main")
    with pytest.raises(ValueError, match="sglang_versions"):
        data = load_preset("smoke").model_dump()
        data["rollout"]["sglang_versions"]["verl"] = "latest"
        BenchmarkSpec.model_validate(data)


def test_each_launch_spells_the_key_of_its_own_sglang():
    miles, verl = _cells()
    assert "--sglang-cuda-graph-max-bs-decode" in miles["argv"]
    assert "+actor_rollout_ref.rollout.engine_kwargs.sglang.cuda_graph_max_bs=512" in verl["argv"]


def test_preflight_passes_the_pinned_versions():
    installed = {"miles": "0.5.16", "verl": "0.5.12"}
    assert sglang_key_problems(_cells(), installed.get) == []


def test_preflight_refuses_verl_on_a_renamed_sglang_with_a_clear_message():
    problems = sglang_key_problems(_cells(), {"miles": "0.5.16", "verl": "0.5.16"}.get)
    assert problems == [
        "verl-megatron-colocate: passes SGLang's cuda_graph_max_bs, which sglang 0.5.16 (installed for verl) does not "
        "accept; it names the cap cuda_graph_max_bs_decode (renamed in 0.5.14): set rollout.sglang_versions.verl: "
        '"0.5.16" in the spec and plan again',
        "verl-megatron-colocate: passes SGLang's disable_piecewise_cuda_graph, which sglang 0.5.16 (installed for "
        "verl) does not accept; it names that switch disable_prefill_cuda_graph (renamed in 0.5.14): set "
        'rollout.sglang_versions.verl: "0.5.16" in the spec and plan again',
    ]
    assert sglang_key_problems(_cells(verl_version="0.5.16"), {"miles": "0.5.16", "verl": "0.5.16"}.get) == []


def test_preflight_refuses_the_decode_flag_on_an_old_miles_sglang_but_keeps_the_alias():
    problems = sglang_key_problems(_cells(), {"miles": "0.5.12", "verl": "0.5.12"}.get)
    assert len(problems) == 1 and problems[0].startswith(
        "miles-megatron-colocate: passes SGLang's --sglang-cuda-graph"
    )
    assert sglang_key_problems(_cells(miles_version="0.5.12"), {"miles": "0.5.16", "verl": "0.5.12"}.get) == []


def test_a_missing_sglang_is_named_and_cells_without_the_key_are_not_checked():
    assert sglang_key_problems(_cells(), {"verl": "0.5.12"}.get) == [
        "miles-megatron-colocate: passes SGLang's --sglang-cuda-graph-max-bs-decode "
        "but no sglang is installed for miles"
    ]
    dense = build_miles_launch(load_preset("smoke"), "fsdp", "colocate")
    assert sglang_key_problems([{"id": "m", "framework": "miles", "argv": dense.argv}], lambda _: None) == []


def test_installed_version_is_read_without_importing_sglang():
    assert installed_sglang_version("no-such-python-here") is None
    assert installed_sglang_version("python3") is None or version_tuple(installed_sglang_version("python3"))


def test_the_environment_record_names_the_sglang_and_its_key():
    packages = {"packages": {"sglang": {"version": "0.5.12", "commit": None}}, "python": "3.12"}
    record = build_environment_record(framework="verl", interpreter_argv=["python3"], packages=packages)
    assert record["sglang"] == {"version": "0.5.12", "cuda_graph_max_bs_key": "cuda_graph_max_bs"}
    none = build_environment_record(framework="miles", interpreter_argv=["python3"], packages={"packages": {}})
    assert none["sglang"] == {"version": None, "cuda_graph_max_bs_key": None}
