"""What VERL 0.9.1 hands SGLang, from VERL's own server code: `SGLangHttpServer.launch_server` builds the server
arguments of the planned VERL cells' rollout configs (verl_children/sglang_server_args.py; SGLang's modules stood in,
it cannot be imported here). Two facts the parity table and the plan rest on:

- the hybrid (colocated) server always runs with `enable_weights_cpu_backup=True`, set after the cell's
  engine_kwargs, so no override turns it off: each sleep copies the rollout weights to CPU and each wake back, work
  Miles does not do, declared with its measured cost (parity row rollout_memory_release); the standalone
  (disaggregated) server has no copy;
- the cells' `attention_backend=fa3` reaches SGLang, where VERL itself would pick flashinfer on SGLang >= 0.5.12
  (FA3 CUDA-graph capture broken there, by VERL's comment): the plan says so beside the launches.

Skipped without the VERL check interpreter, unless MILES_BENCH_REQUIRE_VERL_CHECKS=1."""

import json

import pytest
from scripts.benchmark.frameworks.verl.config import find_verl_root
from scripts.benchmark.frameworks.verl.launch import overrides_of
from tests.benchmark.test_schedule_parity import _launches, _rows
from tests.benchmark.verl_child import verl_child_output

PRESET = "qwen3-4b"
ENGINE = "actor_rollout_ref.rollout.engine_kwargs.sglang"
CELLS = {
    "colocated": ("fsdp", "colocate", "HYBRID", ()),
    "colocated, asked to keep no CPU copy": (
        "megatron",
        "colocate",
        "HYBRID",
        (f"+{ENGINE}.enable_weights_cpu_backup=False",),
    ),
    "disaggregated": ("fsdp", "disaggregated", "STANDALONE", ()),
    "colocated, no attention backend given": ("fsdp", "colocate", "HYBRID", ()),
}


def _overrides(name: str) -> list[str]:
    backend, layout, _, extra = CELLS[name]
    overrides = overrides_of(list(_launches(PRESET, backend, layout)[1])) + list(extra)
    if name == "colocated, no attention backend given":
        overrides = [o for o in overrides if not o.startswith(f"+{ENGINE}.attention_backend=")]
    return overrides


@pytest.fixture(scope="module")
def server_args() -> dict[str, dict]:
    cells = [{"overrides": _overrides(name), "mode": mode} for name, (_, _, mode, _) in CELLS.items()]
    request = {"root": str(find_verl_root()), "sglang_version": "0.5.12", "cells": cells}
    lines = verl_child_output("sglang_server_args.py", json.dumps(request)).splitlines()
    return dict(zip(CELLS, map(json.loads, lines[-len(CELLS) :]), strict=True))


def test_the_colocated_server_copies_its_weights_to_cpu_whatever_the_cell_asks(server_args):
    assert server_args["colocated"]["enable_weights_cpu_backup"] is True
    assert server_args["colocated, asked to keep no CPU copy"]["enable_weights_cpu_backup"] is True
    assert server_args["colocated"]["enable_memory_saver"] is True
    assert server_args["disaggregated"]["enable_weights_cpu_backup"] is False


@pytest.mark.parametrize("backend", ["fsdp", "megatron"])
def test_the_parity_table_declares_the_copy_with_its_cost_and_matches_no_copy_disaggregated(backend):
    row = _rows(PRESET, backend, "colocate")["rollout_memory_release"]
    assert row.status == "asymmetry"
    assert "no CPU copy" in row.candidate and "copied to CPU at the release and back at the wake" in row.reference
    assert "enable_weights_cpu_backup=True" in row.note and "no override turns it off" in row.note
    assert "Qwen3-1.7B 0.12-0.74 s" in row.note and "Qwen3-4B 0.29-1.79 s" in row.note
    assert _rows(PRESET, backend, "disaggregated")["rollout_memory_release"].status == "matched"


def test_the_cells_attention_backend_reaches_sglang_where_verl_would_pick_flashinfer(server_args):
    miles = list(_launches(PRESET, "fsdp", "colocate")[0])
    asked = miles[miles.index("--sglang-attention-backend") + 1]
    assert server_args["colocated"]["attention_backend"] == asked == "fa3"
    assert server_args["disaggregated"]["attention_backend"] == "fa3"
    assert server_args["colocated, no attention backend given"]["attention_backend"] == "flashinfer"
