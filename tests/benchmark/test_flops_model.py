"""The FLOPs model against PyTorch's own counter on the real transformers Qwen3 modules, and its peak table."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from miles.utils.bench_flops import (
    ModelArch,
    batch_train_flops,
    flops_breakdown,
    forward_flops,
    match_device,
    miles_native_forward_flops,
    miles_native_train_flops,
    peak_tflops_for_device,
    train_flops,
    verl_native_train_flops,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL_CONFIGS = REPO_ROOT / "scripts" / "benchmark" / "model_configs"
SEQ_LENS = (16, 128, 384)

# Small random-initialised models. heads*head_dim (4*96=384) != hidden (256) on purpose, GQA 4:2, untied LM head,
# MoE with top-2 of 8 experts and one dense layer (mlp_only_layers) to exercise the layer pattern.
SMALL_COMMON = dict(
    hidden_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=96,
    intermediate_size=512,
    vocab_size=1000,
    tie_word_embeddings=False,
)
SMALL_MOE = dict(moe_intermediate_size=128, num_experts=8, num_experts_per_tok=2, mlp_only_layers=[1])


def _masked_half_of_attention(config, seq_len: int) -> float:
    """What an eager (non-causal) kernel computes beyond causal attention: half of QK^T and of AV, every layer."""
    per_product = 2.0 * seq_len * seq_len * config.head_dim * config.num_attention_heads
    return config.num_hidden_layers * 2 * per_product / 2


def _counted_forward_flops(model, seq_len: int, vocab_size: int) -> float:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    input_ids = torch.randint(0, vocab_size, (1, seq_len), generator=torch.Generator().manual_seed(seq_len))
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_ids=input_ids)
    return float(counter.get_total_flops())


@pytest.fixture(scope="module")
def dense_model():
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    return Qwen3ForCausalLM(Qwen3Config(**SMALL_COMMON, attn_implementation="eager")).eval()


@pytest.fixture(scope="module")
def moe_model():
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(0)
    # The default grouped_mm experts path is invisible to FlopCounterMode; eager is counted.
    config = Qwen3MoeConfig(**SMALL_COMMON, **SMALL_MOE, attn_implementation="eager", experts_implementation="eager")
    return Qwen3MoeForCausalLM(config).eval()


class TestForwardFlopsAgainstPytorchCounter:
    """forward_flops must match what the real modules execute, once the counter's full attention is accounted for."""

    @pytest.mark.parametrize("seq_len", SEQ_LENS)
    def test_dense_qwen3_matches_counter_within_one_percent(self, dense_model, seq_len):
        """Dense Qwen3 with GQA and heads*head_dim != hidden: the o-proj must be counted as 384 x 256."""
        config = dense_model.config
        arch = ModelArch.from_hf_config(config.to_dict())
        counted = _counted_forward_flops(dense_model, seq_len, config.vocab_size)
        modelled = forward_flops(arch, seq_len) + _masked_half_of_attention(config, seq_len)
        assert modelled == pytest.approx(counted, rel=0.01)

    @pytest.mark.parametrize("seq_len", SEQ_LENS)
    def test_moe_qwen3_matches_counter_within_one_percent(self, moe_model, seq_len):
        """MoE: router + top-k experts on layer 0, dense MLP on layer 1 (mlp_only_layers)."""
        config = moe_model.config
        arch = ModelArch.from_hf_config(config.to_dict())
        assert arch.moe_layers == (True, False)
        counted = _counted_forward_flops(moe_model, seq_len, config.vocab_size)
        modelled = forward_flops(arch, seq_len) + _masked_half_of_attention(config, seq_len)
        assert modelled == pytest.approx(counted, rel=0.01)

    def test_the_causal_count_is_really_below_the_counter(self, dense_model):
        """Guard against a vacuous comparison: without the correction the model is off by the masked half."""
        config = dense_model.config
        arch = ModelArch.from_hf_config(config.to_dict())
        counted = _counted_forward_flops(dense_model, 384, config.vocab_size)
        assert forward_flops(arch, 384) < 0.99 * counted
        assert forward_flops(arch, 384, causal=False) == pytest.approx(counted, rel=0.01)


class TestModelArch:
    """Reading HF configs: presets, aliases and errors that name the field."""

    def test_presets_load_with_their_published_shapes(self):
        arch = ModelArch.from_config_path(MODEL_CONFIGS / "qwen3-30b-a3b.json")
        assert (arch.num_layers, arch.num_heads, arch.num_kv_heads, arch.head_dim) == (48, 32, 4, 128)
        assert arch.is_moe and all(arch.moe_layers) and arch.num_experts_per_tok == 8
        dense = ModelArch.from_config_path(MODEL_CONFIGS / "qwen3-4b.json")
        assert not dense.is_moe and dense.num_heads * dense.head_dim == 4096 != dense.hidden_size

    def test_unknown_model_type_is_named_in_the_error(self):
        config = json.loads((MODEL_CONFIGS / "qwen3-4b.json").read_text())
        with pytest.raises(ValueError, match="'llama4'"):
            ModelArch.from_hf_config({**config, "model_type": "llama4"})

    def test_missing_key_is_named_in_the_error(self):
        config = json.loads((MODEL_CONFIGS / "qwen3-30b-a3b.json").read_text())
        del config["moe_intermediate_size"]
        with pytest.raises(ValueError, match="moe_intermediate_size"):
            ModelArch.from_hf_config(config)

    def test_top_k_above_experts_is_rejected(self):
        config = json.loads((MODEL_CONFIGS / "qwen3-30b-a3b.json").read_text())
        with pytest.raises(ValueError, match="num_experts_per_tok 200"):
            ModelArch.from_hf_config({**config, "num_experts_per_tok": 200})

    def test_train_flops_is_three_forwards_and_batches_add_up(self):
        arch = ModelArch.from_config_path(MODEL_CONFIGS / "qwen3-0.6b.json")
        assert train_flops(arch, 1000) == 3 * forward_flops(arch, 1000)
        assert batch_train_flops(arch, [1000, 3000]) == pytest.approx(
            train_flops(arch, 1000) + train_flops(arch, 3000), rel=1e-12
        )

    @pytest.mark.parametrize("config", ["qwen3-0.6b.json", "qwen3-30b-a3b.json"])
    def test_batch_sums_equal_the_per_sequence_sums(self, config):
        """The batch forms (two sums over lengths) against the per-sequence formulas, on jagged lengths."""
        arch = ModelArch.from_config_path(MODEL_CONFIGS / config)
        lens = [int(x) for x in np.random.default_rng(0).integers(1, 9000, 300)]
        assert batch_train_flops(arch, lens) == pytest.approx(sum(train_flops(arch, s) for s in lens), rel=1e-12)
        per_sequence = sum(3.0 * miles_native_forward_flops(arch, s) for s in lens)
        assert miles_native_train_flops(arch, lens) == pytest.approx(per_sequence, rel=1e-12)
        assert batch_train_flops(arch, []) == 0.0 and miles_native_train_flops(arch, []) == 0.0
        with pytest.raises(ValueError, match="seq_len must be > 0, got 0"):
            batch_train_flops(arch, [5, 0])


class TestNativeFormulas:
    """The frameworks' own formulas differ from ours by exactly the terms their docs say they get wrong."""

    def _per_token_linear_term(self, flops_of_one_sequence) -> float:
        """The s-linear coefficient of f(s) = a*s + b*s^2 (per-token FLOPs without the attention term)."""
        f1, f2 = flops_of_one_sequence(1), flops_of_one_sequence(2)
        return f1 - (f2 - 2 * f1) / 2

    @pytest.mark.parametrize(
        "name,miles_gf,matmul_gf,verl_gf",
        [
            ("qwen3-1.7b-base", 10.32, 10.32, 12.19),
            ("qwen3-4b", 23.28, 24.13, 26.47),
            ("qwen3-30b-a3b", 16.97, 18.17, 20.12),
        ],
    )
    def test_per_token_costs_match_the_independent_anchor_table(self, name, miles_gf, matmul_gf, verl_gf):
        """Computed by hand (its matmul column leaves out the MoE router, so we do too)."""
        arch = ModelArch.from_config_path(MODEL_CONFIGS / f"{name}.json")
        router = 3 * flops_breakdown(arch, 1)["router"]
        ours = self._per_token_linear_term(lambda s: train_flops(arch, s)) - router
        miles = self._per_token_linear_term(lambda s: miles_native_train_flops(arch, [s]))
        verl = self._per_token_linear_term(lambda s: verl_native_train_flops(arch, [s]))
        assert (round(miles / 1e9, 2), round(ours / 1e9, 2), round(verl / 1e9, 2)) == (miles_gf, matmul_gf, verl_gf)

    def test_verl_exceeds_ours_by_its_embedding_term_only(self):
        """VERL's 6*sum(s^2)*d*heads*layers equals our causal train attention; the gap is 6*vocab*hidden per token."""
        for name in ("qwen3-4b", "qwen3-30b-a3b"):
            arch = ModelArch.from_config_path(MODEL_CONFIGS / f"{name}.json")
            seq_lens = [700, 4096]
            gap = verl_native_train_flops(arch, seq_lens) - batch_train_flops(arch, seq_lens)
            # VERL counts the router too (and Qwen3 MoE has no shared experts), so only the embedding remains.
            assert gap == pytest.approx(6 * arch.vocab_size * arch.hidden_size * sum(seq_lens), rel=1e-12)

    def test_miles_undercounts_the_output_projection_when_heads_times_head_dim_exceeds_hidden(self):
        arch = ModelArch.from_config_path(MODEL_CONFIGS / "qwen3-4b.json")
        s = 2048
        gap = 3 * forward_flops(arch, s) - miles_native_train_flops(arch, [s])
        extra_width = arch.num_heads * arch.head_dim - arch.hidden_size
        expected = 3 * arch.num_layers * 2.0 * s * arch.hidden_size * extra_width
        assert gap == pytest.approx(expected, rel=1e-12)


class TestPeakTable:
    """Device names as torch.cuda.get_device_name() spells them."""

    @pytest.mark.parametrize(
        "device,key,peak",
        [
            ("NVIDIA H100 80GB HBM3", "H100", 989.0),
            ("NVIDIA H100 PCIe", "H100 PCIE", 756.0),
            ("NVIDIA H200", "H200", 989.0),
            ("NVIDIA H20", "H20", 148.0),
            ("NVIDIA H800", "H800", 989.0),
            ("NVIDIA A100-SXM4-80GB", "A100", 312.0),
            ("NVIDIA A800-SXM4-80GB", "A800", 312.0),
            ("NVIDIA GH200 480GB", "GH200", 989.0),
            ("NVIDIA B200", "B200", 2250.0),
            ("NVIDIA GB200", "GB200", 2500.0),
            ("AMD Instinct MI300X", "MI300X", 1307.4),
        ],
    )
    def test_known_devices_resolve_to_their_dense_bf16_peak(self, device, key, peak):
        assert match_device(device) == key
        assert peak_tflops_for_device(device) == peak

    def test_unknown_device_gives_none_never_inf(self):
        assert peak_tflops_for_device("NVIDIA GeForce RTX 4090") is None
        assert peak_tflops_for_device("") is None

    def test_inside_a_miles_checkout_miles_own_table_answers_first(self, monkeypatch):
        """Miles is not installed here, so its `miles.utils.device_flops` module is stood in by one with the same
        function name and a deliberately different figure; devices it does not list fall back to our table."""
        import types

        stand_in = types.ModuleType("miles.utils.device_flops")
        stand_in.peak_bf16_tflops = lambda name: 900.0 if "H200" in name else None
        monkeypatch.setitem(sys.modules, "miles.utils.device_flops", stand_in)
        assert peak_tflops_for_device("NVIDIA H200") == 900.0
        assert peak_tflops_for_device("NVIDIA A100-SXM4-80GB") == 312.0
