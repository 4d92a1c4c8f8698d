"""Calibration: the CPU path of calibrate.py end to end, the committed GPU results and the functions reports call."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from scripts.benchmark.calibration.interconnect import MULTICAST_OFF_ENV, bus_bandwidth_factor, measure_collectives
from scripts.benchmark.calibration.packed import PACKED_ATTENTION
from scripts.benchmark.calibration.results import (
    CALIBRATION_DIR,
    device_key,
    load_calibration,
    measured_copy_gb_per_s,
    measured_peak_tflops,
    parameter_count,
    roofline_spread,
    roofline_tflops,
    weight_sync_floor_s,
)
from scripts.benchmark.calibration.roofline import ATTENTION_DESCRIPTION
from scripts.benchmark.calibration.shapes import pack_sequences, read_preset_shapes
from scripts.benchmark.model_config import MODEL_CONFIGS_DIR, preset_names
from scripts.benchmark.model_config import resolve_model_config as read_model_config

from miles.utils.bench_flops import ModelArch, batch_train_flops, peak_tflops_for_device

REPO_ROOT = Path(__file__).resolve().parents[2]
CALIBRATE = REPO_ROOT / "scripts" / "benchmark" / "calibrate.py"
MODEL_NAMES = sorted(p.stem for p in MODEL_CONFIGS_DIR.glob("*.json"))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> tuple[Path, dict]:
    """One real run of the CPU path (tiny GEMMs, 2-layer Qwen3, 2 gloo processes), as CI runs it."""
    out = tmp_path_factory.mktemp("calibration")
    env = {k: v for k, v in os.environ.items() if k not in MULTICAST_OFF_ENV}
    subprocess.run(
        [sys.executable, str(CALIBRATE), "--tiny", "--output-dir", str(out)],
        check=True,
        cwd=out,
        env=env,
        timeout=300,
        capture_output=True,
    )
    return out, json.loads((out / "cpu.json").read_text())


class TestCalibrateCpuPath:
    def test_every_part_is_measured_and_recorded(self, tiny_run):
        """The tiny run records environment, peak, roofline, counter check and interconnect, none as an error."""
        _, data = tiny_run
        assert data["schema_version"] == 1 and data["device_key"] == "cpu"
        assert data["environment"]["torch"] and data["date"].endswith("+00:00")
        for part in ("peak", "roofline", "flops_crosscheck", "interconnect"):
            assert "error" not in data[part], data[part]

    def test_peak_summaries_hold_every_repeat(self, tiny_run):
        """Each GEMM shape keeps n repeats with ordered quantiles; the headline is the best shape's median."""
        peak = tiny_run[1]["peak"]
        shapes = peak["per_device"][0]["matmul_bf16"]["shapes"]
        assert [s["m"] for s in shapes] == [64, 128]
        for s in shapes:
            t = s["tflops"]
            assert t["n"] == 5 and 0 < t["min"] <= t["p10"] <= t["median"] <= t["p90"] <= t["max"]
        assert peak["bf16_tflops_median"] == max(s["tflops"]["median"] for s in shapes)
        assert peak["per_device"][0]["d2d_copy"]["gb_per_s"]["median"] > 0

    def test_roofline_uses_the_flops_model_for_every_shape_and_mode(self, tiny_run):
        """TFLOP/s = FLOPs model of the shape / median step time, with and without activation checkpointing."""
        from scripts.benchmark.calibration.command import TINY_CONFIG, TINY_SHAPES

        entry = tiny_run[1]["roofline"]["tiny"]
        arch = ModelArch.from_hf_config(TINY_CONFIG)
        assert set(entry["shapes"]) == set(TINY_SHAPES) and entry["num_params_run"] == parameter_count(TINY_CONFIG)
        for name, seq_lens in TINY_SHAPES.items():
            shape = entry["shapes"][name]
            assert shape["seq_lens"] == seq_lens and shape["tokens"] == sum(seq_lens)
            assert shape["model_train_flops_per_step"] == batch_train_flops(arch, seq_lens)
            for mode in ("off", "on"):
                timing = shape["grad_ckpt"][mode]
                steps = timing["samples"]["kernel_s"]
                rates = sorted(shape["model_train_flops_per_step"] / t / 1e12 for t in steps)
                assert timing["tflops"]["n"] == len(steps) == 2  # one repeat in each of two runs, pooled
                assert timing["tflops"]["median"] == pytest.approx((rates[0] + rates[1]) / 2, rel=1e-9)
                assert len(timing["runs"]) == entry["runs"] == 2
                run_medians = [r["tflops"] for r in timing["runs"]]
                assert timing["run_to_run_pct"]["tflops"] == pytest.approx(
                    100 * (max(run_medians) - min(run_medians)) / min(run_medians)
                )

    def test_roofline_runs_one_packed_row_per_step(self, tiny_run):
        """The timed step is the packed row (attention per sequence) of the plan, with its timing recorded."""
        entry = tiny_run[1]["roofline"]["tiny"]
        assert entry["attention"].startswith("packed row") and entry["timing"].startswith("host clock")
        assert tiny_run[1]["settings"]["roofline_runs"] == 2

    def test_flop_counter_agrees_with_the_flops_model(self, tiny_run):
        """PyTorch's counter over the real Qwen3 step matches the FLOPs model (full attention) within 1%."""
        (check,) = tiny_run[1]["flops_crosscheck"]
        assert check["attention"] == "eager" and check["agrees_within_1pct"]
        assert check["counter_over_model_as_counted"] == pytest.approx(1.0, abs=1e-6)
        assert check["counter_over_model_causal"] > 1.0  # the counter charges the masked half too

    def test_gloo_collectives_ran_on_two_processes(self, tiny_run):
        """The launch gives 2 ranks, every collective verified, busbw = algbw * nccl-tests factor, multicast off."""
        inter = tiny_run[1]["interconnect"]
        assert inter["world_size"] == 2 and inter["backend"] == "gloo"
        assert inter["env"] == MULTICAST_OFF_ENV
        assert inter["verified_collectives"] == sorted(["all_gather", "reduce_scatter", "all_reduce", "broadcast"])
        assert len(inter["table"]) == 8
        for row in inter["table"]:
            factor = bus_bandwidth_factor(row["collective"], 2)
            assert row["busbw_gb_per_s"] == pytest.approx(row["algbw_gb_per_s"] * factor)
            assert row["algbw_gb_per_s"] == pytest.approx(row["message_bytes"] / row["time_s"] / 1e9)

    def test_weight_sync_floor_moves_every_bf16_parameter_at_the_measured_rate(self, tiny_run):
        """Floors from the run's own tables: all params once over broadcast algbw, read+write over copy GB/s."""
        out, data = tiny_run
        largest = max(
            (r for r in data["interconnect"]["table"] if r["collective"] == "broadcast"),
            key=lambda r: r["message_bytes"],
        )
        params = parameter_count(read_model_config("qwen3-0.6b"))
        floor = weight_sync_floor_s("cpu", "qwen3-0.6b", "broadcast", directory=out)
        assert floor == pytest.approx(2 * params / (largest["algbw_gb_per_s"] * 1e9))
        copy = measured_copy_gb_per_s("cpu", directory=out)
        assert weight_sync_floor_s("cpu", "qwen3-0.6b", "d2d_copy", directory=out) == pytest.approx(
            4 * params / (copy * 1e9)
        )


class TestCommittedH200Calibration:
    """The committed NVIDIA H200 run, as reports on that GPU read it."""

    data = load_calibration("NVIDIA H200")

    def test_is_found_from_the_device_name_and_records_its_environment(self):
        """torch.cuda.get_device_name() alone finds it; date, GPU, driver and versions are recorded."""
        assert self.data is not None
        env = self.data["environment"]
        assert env["gpu_name"] == "NVIDIA H200" and env["gpu_count"] >= 1
        assert env["driver"] and env["torch"] and env["cuda"] and self.data["date"]

    def test_measured_peak_is_below_the_datasheet_peak(self):
        """The achieved matmul rate is a real fraction of the 989 TFLOP/s datasheet figure."""
        measured = measured_peak_tflops("NVIDIA H200")
        assert 0.5 * peak_tflops_for_device("NVIDIA H200") < measured < peak_tflops_for_device("NVIDIA H200")
        assert measured_copy_gb_per_s("NVIDIA H200") > 1000

    def test_roofline_covers_every_preset_and_backend_below_the_peak(self):
        """Each preset has both backends with checkpointing, and without it wherever the packed row fits one GPU;
        recompute makes checkpointing slower."""
        peak = measured_peak_tflops("NVIDIA H200")
        for preset in preset_names():
            for backend in ("megatron", "fsdp"):
                off = roofline_tflops("NVIDIA H200", preset, False, backend=backend)
                on = roofline_tflops("NVIDIA H200", preset, True, backend=backend)
                if off is None:
                    error = self.data["roofline"][preset]["shapes"][backend]["grad_ckpt"]["off"]["error"]
                    assert error.startswith("out of memory"), (preset, backend, error)
                    off = peak
                assert 0 < on < off <= peak, (preset, backend, on, off)

    def test_only_rows_too_large_for_one_gpu_went_unmeasured(self):
        """Out of memory without checkpointing, at 18432 tokens of qwen3-4b and 32768 of the cut MoE: no others."""
        failed = {
            (preset, name, mode)
            for preset, entry in self.data["roofline"].items()
            for name, shape in entry["shapes"].items()
            for mode, figures in shape["grad_ckpt"].items()
            if "error" in figures
        }
        assert failed == {("qwen3-4b", "fsdp", "off"), ("qwen3-30b-a3b", "megatron", "off")}

    def test_roofline_shapes_are_the_presets_current_shapes(self):
        """A preset whose lengths or token budget changed needs a new GPU run: this fails until it has one."""
        for preset in preset_names():
            expected = read_preset_shapes(preset).shapes()
            measured = {k: v["seq_lens"] for k, v in self.data["roofline"][preset]["shapes"].items()}
            assert measured == expected, preset

    def test_roofline_flops_are_the_current_flops_model(self):
        """A changed FLOPs model makes the stored TFLOP/s stale: the stored per-step FLOPs must still match."""
        for preset, entry in self.data["roofline"].items():
            config = read_model_config(entry["config"])
            config = dict(config, num_hidden_layers=entry["num_layers_run"])
            arch = ModelArch.from_hf_config(config)
            for shape in entry["shapes"].values():
                assert shape["model_train_flops_per_step"] == pytest.approx(
                    batch_train_flops(arch, shape["seq_lens"]), rel=1e-12
                ), preset

    def test_gpu_flop_counter_checks_all_agree(self):
        """On the GPU the counter (packed step and eager, dense and MoE) agreed with the FLOPs model within 1%."""
        checks = [c for c in self.data["flops_crosscheck"] if "error" not in c]
        assert {c["attention"] for c in checks} == {PACKED_ATTENTION, "eager"} and len(checks) == 4
        assert all(c["agrees_within_1pct"] for c in checks), checks
        failed = [c for c in self.data["flops_crosscheck"] if "error" in c]  # the 18432-token row, no recompute
        assert [(c["shape"], c["error"].split(":")[0]) for c in failed] == [("fsdp", "OutOfMemoryError")]

    def test_every_roofline_repeats_within_five_percent_run_to_run(self):
        """Two back-to-back runs of the committed calibration agree within 5% on every preset, shape and mode."""
        assert self.data["settings"]["roofline_runs"] == 2
        for preset, entry in self.data["roofline"].items():
            assert entry["runs"] == 2 and entry["attention"] == ATTENTION_DESCRIPTION, preset
            for name, shape in entry["shapes"].items():
                for mode, figures in shape["grad_ckpt"].items():
                    if "error" in figures:
                        continue  # out of memory, see test_only_rows_too_large_for_one_gpu_went_unmeasured
                    assert len(figures["runs"]) == 2, (preset, name, mode)
                    assert figures["run_to_run_pct"]["tflops"] <= 5.0, (preset, name, mode, figures["runs"])

    def test_spread_of_a_roofline_is_read_with_it(self):
        """roofline_spread gives the p10 / p90 around roofline_tflops and the run-to-run spread."""
        median = roofline_tflops("NVIDIA H200", "qwen3-4b", True, backend="fsdp")
        spread = roofline_spread("NVIDIA H200", "qwen3-4b", True, backend="fsdp")
        assert spread["p10"] <= median <= spread["p90"] and 0 <= spread["run_to_run_pct"] <= 5
        assert roofline_spread("NVIDIA H100 80GB HBM3", "qwen3-4b", True) is None

    def test_a_model_config_name_finds_its_preset(self):
        assert roofline_tflops("NVIDIA H200", "qwen3-0.6b", False) == roofline_tflops("NVIDIA H200", "smoke", False)

    def test_single_gpu_run_has_no_collective_floor(self):
        """Interconnect was not measured on one GPU: its floors are None, never 0."""
        assert "skipped" in self.data["interconnect"]
        assert weight_sync_floor_s("NVIDIA H200", "qwen3-4b", "broadcast") is None
        assert weight_sync_floor_s("NVIDIA H200", "qwen3-4b", "d2d_copy") > 0


class TestCalibrationLookup:
    def test_device_key_lowercases_and_joins_words(self):
        assert device_key("NVIDIA H200") == "nvidia-h200"
        assert device_key("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
        with pytest.raises(ValueError, match="no letters or digits"):
            device_key(" -- ")

    def test_an_uncalibrated_gpu_gives_none(self):
        assert load_calibration("NVIDIA H100 80GB HBM3") is None
        assert measured_peak_tflops("NVIDIA H100 80GB HBM3") is None
        assert roofline_tflops("NVIDIA H100 80GB HBM3", "qwen3-4b", False) is None
        assert weight_sync_floor_s("NVIDIA H100 80GB HBM3", "qwen3-4b") is None

    def test_unknown_names_are_rejected_with_what_is_known(self, tmp_path):
        with pytest.raises(ValueError, match="qwen3-4b"):
            read_model_config("qwen3-5b")
        with pytest.raises(ValueError, match="weight-sync path"):
            weight_sync_floor_s("NVIDIA H200", "qwen3-4b", "rdma")
        with pytest.raises(ValueError, match="backend must be one of"):
            roofline_tflops("NVIDIA H200", "qwen3-4b", False, backend="deepspeed")
        (tmp_path / "nvidia-h200.json").write_text(json.dumps({"schema_version": 99}))
        with pytest.raises(ValueError, match="schema_version 99"):
            load_calibration("NVIDIA H200", directory=tmp_path)

    def test_every_committed_file_is_named_by_its_gpu(self):
        for path in CALIBRATION_DIR.glob("*.json"):
            assert path.stem == device_key(json.loads(path.read_text())["environment"]["gpu_name"])


class TestParameterCount:
    @pytest.mark.parametrize("name", MODEL_NAMES)
    def test_matches_the_transformers_model(self, name):
        """The pure count equals numel over the real transformers model built on the meta device."""
        import torch
        from scripts.benchmark.calibration.roofline import build_causal_lm

        config = read_model_config(name)
        model = build_causal_lm(config, device=torch.device("meta"))
        assert parameter_count(config) == sum(p.numel() for p in model.parameters())

    def test_rejects_other_architectures(self):
        with pytest.raises(ValueError, match="llama"):
            parameter_count({"model_type": "llama"})


class TestPresetShapes:
    @pytest.mark.parametrize("preset", preset_names())
    def test_yaml_reading_agrees_with_the_spec(self, preset):
        """The PyYAML-only reading (GPU images lack pydantic) gives the validated spec's budgets and lengths."""
        from scripts.benchmark.spec import load_preset

        spec, shapes = load_preset(preset), read_preset_shapes(preset)
        assert shapes.model_config == spec.model.config
        assert (shapes.max_prompt, shapes.max_response) == (spec.lengths.max_prompt, spec.lengths.max_response)
        assert shapes.max_tokens_per_gpu == {b: spec.max_tokens_per_gpu(b) for b in ("megatron", "fsdp")}
        for backend, budget in shapes.max_tokens_per_gpu.items():
            pack = shapes.shapes()[backend]
            assert sum(pack) == budget and max(pack) <= spec.lengths.max_prompt + spec.lengths.max_response

    def test_pack_fills_the_budget_with_the_length_mix(self):
        assert pack_sequences(9216, 1024, 8192) == [4096, 3072, 2048]
        assert pack_sequences(32768, 1024, 8192) == [4096, 3072, 2048] * 3 + [4096, 1024]
        with pytest.raises(ValueError, match="budget 0"):
            pack_sequences(0, 1024, 8192)

    def test_unknown_preset_lists_the_known_ones(self):
        with pytest.raises(ValueError, match="qwen3-4b"):
            read_preset_shapes("qwen3-5b")


class TestCounterFormulas:
    def test_grouped_kv_heads_cost_what_query_heads_cost(self):
        """The GQA formulas equal torch's own formula on K/V expanded to the query heads."""
        import torch
        from scripts.benchmark.calibration.roofline import gqa_sdpa_flop_formulas
        from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

        formulas = gqa_sdpa_flop_formulas()
        q, kv = (2, 32, 300, 128), (2, 8, 300, 128)
        forward = formulas[torch.ops.aten._scaled_dot_product_flash_attention]
        backward = formulas[torch.ops.aten._scaled_dot_product_efficient_attention_backward]
        assert forward(q, kv, kv) == sdpa_flop_count(q, q, q) == 4 * 2 * 32 * 300 * 300 * 128
        assert backward(q, q, kv, kv) == sdpa_backward_flop_count(q, q, q, q)

    def test_varlen_flash_counts_each_packed_sequence_with_grouped_heads(self):
        """The packed kernel is counted per sequence (s_i x s_i, not the whole row), K/V heads as query heads."""
        import torch
        from scripts.benchmark.calibration.roofline import gqa_sdpa_flop_formulas
        from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

        formulas = gqa_sdpa_flop_formulas()
        lens, heads, kv_heads, dim = [300, 100], 32, 8, 128
        q, k = torch.empty(sum(lens), heads, dim), torch.empty(sum(lens), kv_heads, dim)
        cu = torch.tensor([0, 300, 400], dtype=torch.int32)
        forward = formulas[torch.ops.aten._flash_attention_forward](q, k, k, cu, cu, 300, 300, 0.0, True, False)
        backward = formulas[torch.ops.aten._flash_attention_backward](q, q, k, k, q, None, cu, cu, 300, 300)
        shapes = [(1, heads, s, dim) for s in lens]
        assert forward == sum(sdpa_flop_count(s, s, s) for s in shapes) == sum(4 * heads * s * s * dim for s in lens)
        assert backward == sum(sdpa_backward_flop_count(s, s, s, s) for s in shapes)

    def test_activation_checkpointing_is_really_switched(self):
        """With checkpointing the counter sees the recomputed forward; without it, exactly the model's count."""
        import torch
        from scripts.benchmark.calibration.command import TINY_CONFIG
        from scripts.benchmark.calibration.roofline import (
            build_causal_lm,
            count_step_flops,
            make_sequences,
            set_activation_checkpointing,
        )

        model = build_causal_lm(TINY_CONFIG, device=torch.device("cpu"), attn_implementation="eager")
        sequences = make_sequences([64], TINY_CONFIG["vocab_size"], torch.device("cpu"))
        plain = count_step_flops(model, sequences)["total"]
        set_activation_checkpointing(model, True)
        recomputed = count_step_flops(model, sequences)["total"]
        set_activation_checkpointing(model, False)
        assert count_step_flops(model, sequences)["total"] == plain < recomputed

    def test_moe_step_agrees_with_eager_experts(self):
        """Qwen3 MoE (router + top-k experts) counted by the counter matches the FLOPs model within 1%."""
        import torch
        from scripts.benchmark.calibration.command import TINY_CONFIG
        from scripts.benchmark.calibration.roofline import crosscheck_flops

        moe = dict(
            TINY_CONFIG,
            model_type="qwen3_moe",
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=64,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            norm_topk_prob=True,
            tie_word_embeddings=False,
        )
        check = crosscheck_flops(
            moe, [64, 32], device=torch.device("cpu"), attn_implementation="eager", dtype=torch.float32
        )
        assert check["agrees_within_1pct"], check


class TestPackedStep:
    def test_packed_row_computes_what_separate_sequences_compute(self):
        """One packed row (positions restarting, attention per sequence) gives each sequence's own logits."""
        import torch
        from scripts.benchmark.calibration.command import TINY_CONFIG
        from scripts.benchmark.calibration.packed import pack_batch, register_packed_attention
        from scripts.benchmark.calibration.roofline import build_causal_lm

        device, lens = torch.device("cpu"), [64, 48, 32]
        packed = build_causal_lm(TINY_CONFIG, device=device, attn_implementation=register_packed_attention())
        separate = build_causal_lm(TINY_CONFIG, device=device, attn_implementation="sdpa")
        batch = pack_batch(lens, TINY_CONFIG["vocab_size"], device)
        assert batch["position_ids"][0].tolist() == [*range(64), *range(48), *range(32)]
        assert batch["cu_seq_lens_q"].tolist() == [0, 64, 112, 144] and batch["max_length_q"] == 64
        with torch.no_grad():
            row = packed(**batch).logits[0]
            pieces = torch.split(batch["input_ids"][0], lens)
            each = torch.cat([separate(input_ids=p[None], use_cache=False).logits[0] for p in pieces])
            whole = separate(input_ids=batch["input_ids"], use_cache=False).logits[0]
        assert torch.allclose(row, each, atol=1e-5)
        assert not torch.allclose(row[64:], whole[64:], atol=1e-3)  # attending across sequences would differ

    def test_packed_attention_refuses_a_row_without_sequence_bounds(self):
        import torch
        from scripts.benchmark.calibration.packed import pack_batch, packed_attention_forward

        q = torch.zeros(1, 4, 8, 16)
        with pytest.raises(ValueError, match="cu_seq_lens_q"):
            packed_attention_forward(None, q, q, q, None)
        with pytest.raises(ValueError, match="positive"):
            pack_batch([4, 0], 16, torch.device("cpu"))


class TestStepTiming:
    def test_busy_time_counts_overlaps_once(self):
        from scripts.benchmark.calibration.step_timing import busy_ns

        assert busy_ns([]) == 0
        assert busy_ns([(0, 10), (20, 25)]) == 15
        assert busy_ns([(0, 10), (5, 12), (12, 13), (1, 2)]) == 13

    def test_cpu_step_is_host_timed_and_repeats_are_checked(self):
        import torch
        from scripts.benchmark.calibration.step_timing import time_step

        calls = []
        times = time_step(lambda: calls.append(1), torch.device("cpu"), warmup=2, wall_repeats=3, kernel_repeats=4)
        assert len(calls) == 5 and len(times["wall_s"]) == 3 and times["kernel_s"] == times["wall_s"]
        with pytest.raises(ValueError, match=">= 1"):
            time_step(lambda: None, torch.device("cpu"), warmup=0, wall_repeats=1, kernel_repeats=1)

    def test_runs_are_pooled_with_their_spread(self):
        """Merged figures cover every repeat of every run; run_to_run_pct compares the runs' medians."""
        from scripts.benchmark.calibration.spread import merge_runs, mode_figures

        def run(kernel_s):
            mode = mode_figures(1e12, 100, kernel_s, [2 * t for t in kernel_s], peak_memory_gib=1.0)
            shape = {"seq_lens": [100], "tokens": 100, "model_train_flops_per_step": 1e12, "grad_ckpt": {"off": mode}}
            return {"p": {"config": "m", "shapes": {"max_len": shape}}}

        merged = merge_runs([run([1.0, 1.0, 1.0]), run([1.04, 1.04, 1.04])])["p"]
        figures = merged["shapes"]["max_len"]["grad_ckpt"]["off"]
        assert merged["runs"] == 2 and figures["tflops"]["n"] == 6
        assert [r["tflops"] for r in figures["runs"]] == [pytest.approx(1.0), pytest.approx(1 / 1.04)]
        assert figures["run_to_run_pct"]["tflops"] == pytest.approx(4.0)
        assert figures["wall_tflops"]["median"] == pytest.approx((1 / 2 + 1 / 2.08) / 2)
        failed = merge_runs([{"p": {"error": "out of memory"}}, run([1.0])])
        assert failed["p"] == {"error": "out of memory"}


class TestCollectiveLaunch:
    def test_needs_two_processes_and_known_collectives(self):
        with pytest.raises(ValueError, match="world_size=1"):
            measure_collectives(1, backend="gloo")
        with pytest.raises(ValueError, match="unknown collective 'all_to_all'"):
            measure_collectives(2, backend="gloo", collectives=["all_to_all"])
        with pytest.raises(ValueError, match="too small"):
            measure_collectives(4, backend="gloo", message_bytes=[4])

    def test_bus_bandwidth_factors_follow_nccl_tests(self):
        assert bus_bandwidth_factor("all_reduce", 8) == pytest.approx(1.75)
        assert bus_bandwidth_factor("all_gather", 8) == bus_bandwidth_factor("reduce_scatter", 8) == 0.875
        assert bus_bandwidth_factor("broadcast", 8) == 1.0


class TestPlanValidation:
    def test_bad_parts_and_shapes_fail_before_any_measurement(self, tmp_path):
        from scripts.benchmark.calibration.command import build_calibration_plan

        with pytest.raises(ValueError, match="unknown parts"):
            build_calibration_plan(
                output_dir=tmp_path, device="cpu", tiny=True, presets=[], moe_num_layers=1, parts=["gemm"]
            )
        with pytest.raises(ValueError, match="no preset named 'qwen3-5b'"):
            build_calibration_plan(
                output_dir=tmp_path, device="cuda", tiny=False, presets=["qwen3-5b"], moe_num_layers=1, parts=[]
            )
        with pytest.raises(ValueError, match="device must be"):
            build_calibration_plan(
                output_dir=tmp_path, device="tpu", tiny=False, presets=["smoke"], moe_num_layers=1, parts=[]
            )


@pytest.mark.gpu
def test_gpu_path_measures_this_gpu(tmp_path):
    """On a CUDA device: the peak and a preset roofline run, and the counter agrees on the timed SDPA step."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device: the GPU path is run on the lent accelerator, not in CPU CI")
    subprocess.run(
        [
            sys.executable,
            str(CALIBRATE),
            "--presets",
            "smoke",
            "--parts",
            "peak,roofline,crosscheck",
            "--output-dir",
            str(tmp_path),
        ],
        check=True,
        timeout=540,
    )
    data = json.loads((tmp_path / f"{device_key(torch.cuda.get_device_name(0))}.json").read_text())
    assert data["peak"]["bf16_tflops_median"] > 0
    assert data["roofline"]["smoke"]["shapes"]["megatron"]["grad_ckpt"]["off"]["tflops"]["median"] > 0
    assert [c["agrees_within_1pct"] for c in data["flops_crosscheck"]] == [True] * len(data["flops_crosscheck"])


@pytest.mark.gpu
def test_two_calibrate_runs_agree_on_every_smoke_and_1_7b_roofline(tmp_path):
    """Two calibrate invocations, one after the other: every roofline of smoke and qwen3-1.7b-base within 5%."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device: the GPU path is run on the lent accelerator, not in CPU CI")
    presets, runs = ["smoke", "qwen3-1.7b-base"], []
    for run in ("first", "second"):
        out = tmp_path / run
        command = [sys.executable, str(CALIBRATE), "--presets", ",".join(presets), "--parts", "roofline"]
        subprocess.run([*command, "--roofline-runs", "1", "--output-dir", str(out)], check=True, timeout=400)
        runs.append(json.loads((out / f"{device_key(torch.cuda.get_device_name(0))}.json").read_text()))
    apart = {}
    for preset in presets:
        first, second = (r["roofline"][preset]["shapes"] for r in runs)
        assert set(first) == set(second) == {"max_len", "megatron", "fsdp"}
        for shape in first:
            for mode in ("off", "on"):
                a, b = (s[shape]["grad_ckpt"][mode]["tflops"]["median"] for s in (first, second))
                apart[(preset, shape, mode)] = 100 * abs(a - b) / min(a, b)
    print("\n".join(f"{key}: {pct:.2f}% apart" for key, pct in apart.items()))
    assert max(apart.values()) <= 5.0, apart


class TestGpuImageImports:
    def test_calibrate_imports_no_pydantic(self):
        """The GPU image has torch and PyYAML but no pydantic: calibrate.py and what it imports must not need it."""
        code = "\n".join(
            [
                "import runpy, sys",
                f"sys.argv = [{str(CALIBRATE)!r}, '--help']",
                "try:",
                "    runpy.run_path(sys.argv[0], run_name='__main__')",
                "except SystemExit:",
                "    pass",
                "assert 'pydantic' not in sys.modules, 'calibrate.py imported pydantic'",
            ]
        )
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]


def test_run_py_calibrate_is_the_same_command(tmp_path):
    """`run.py calibrate` runs calibrate.py's command: the tiny CPU peak lands in <output-dir>/cpu.json."""
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "benchmark" / "run.py"), "calibrate", "--tiny", "--device", "cpu"]
        + ["--parts", "peak", "--output-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "cpu.json").read_text())
    assert data["device_key"] == "cpu" and data["peak"]["bf16_tflops_median"] > 0


if __name__ == "__main__":
    # Miles runs a file with a CUDA registration as `python3 <file>`: its gpu-marked tests.
    sys.exit(pytest.main([__file__, "-m", "gpu"]))
