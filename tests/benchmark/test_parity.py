"""The parity proof: the two launches parsed back match knob by knob, and every known trap of the two frameworks,
planted in a launch, is caught before anything runs."""

from functools import cache

import pytest
from omegaconf import OmegaConf

from scripts.benchmark.contracts.parity import ParityPair
from scripts.benchmark.frameworks import registry
from scripts.benchmark.frameworks.miles.flags import split_flags
from scripts.benchmark.frameworks.miles.launch import build_miles_launch
from scripts.benchmark.frameworks.miles.parity_knobs import parse_miles
from scripts.benchmark.frameworks.verl.config import compose_overrides
from scripts.benchmark.frameworks.verl.data import converted_paths, prepare_step
from scripts.benchmark.frameworks.verl.launch import VerlData, build_verl_launch, hydra_string
from scripts.benchmark.frameworks.verl.parity_knobs import (
    MCORE_ADAM,
    VERL_DEFAULTS,
    VERL_FSDP_DEFAULTS,
    VERL_MEGATRON_DEFAULTS,
    parse_hydra_value,
    parse_verl,
)
from scripts.benchmark.plan.parity import ParityError, ParitySide, build_parity, parity_file, parity_markdown
from scripts.benchmark.spec import BACKENDS, LAYOUTS, BenchmarkSpec, load_preset, preset_names, with_overrides

AR = "actor_rollout_ref"


@cache
def _launches(preset: str, backend: str, layout: str):
    spec = with_overrides(load_preset(preset), layout=layout)
    train, val = converted_paths(spec, "/out/data")
    miles = build_miles_launch(spec, backend, layout)
    verl = build_verl_launch(spec, backend, layout, VerlData(train, val))
    return tuple(miles.argv), tuple(verl.argv), tuple(prepare_step(spec, "/out/data", "run.py")["argv"])


def _build(miles, verl, backend, layout, prepare):
    """build_parity of a Miles (candidate) launch against a VERL (reference) launch, through the adapters."""
    candidate = ParitySide(registry.get("miles"), list(miles))
    reference = ParitySide(registry.get("verl"), list(verl), list(prepare))
    return build_parity(candidate, reference, backend, layout)


def _parity(preset="qwen3-1.7b-base", backend="fsdp", layout="colocate", miles_edit=None, verl_edit=None):
    miles, verl, prepare = (list(x) for x in _launches(preset, backend, layout))
    miles = miles_edit(miles) if miles_edit else miles
    verl = verl_edit(verl) if verl_edit else verl
    return _build(miles, verl, backend, layout, prepare)


def m_drop(flag):
    def edit(argv):
        out, skipping = [], False
        for token in argv:
            if token == flag:
                skipping = True
                continue
            if skipping and not token.startswith("--"):
                continue
            skipping = False
            out.append(token)
        assert out != argv, f"{flag} was not in the launch"
        return out

    return edit


def m_add(*tokens):
    return lambda argv: argv + list(tokens)


def v_drop(key):
    def edit(argv):
        out = [t for t in argv if t.partition("=")[0].lstrip("+") != key]
        assert out != argv, f"{key} was not in the launch"
        return out

    return edit


def v_set(token):
    key = token.partition("=")[0].lstrip("+")
    return lambda argv: [t for t in argv if t.partition("=")[0].lstrip("+") != key] + [token]


def both(*edits):
    def edit(argv):
        for e in edits:
            argv = e(argv)
        return argv

    return edit


SCHEDULES = ("drain", "continuous")
DIFFERENT_WORK = {
    "rollout_memory_release": {"colocate"},
    "max_policy_lag": {"continuous"},
    "first_steps_composition": {"disaggregated"},
    "loop_shape": {"disaggregated"},
    "partial_rollout": {"disaggregated"},
}
"""Rows whose two sides do different work in these layouts or schedules (the frameworks' own code says so:
test_verl_sglang_server.py, test_policy_lag.py, test_schedule_parity.py): never matched there."""


def _every_pair():
    for preset in preset_names():
        for layout in LAYOUTS:
            for schedule in SCHEDULES if layout == "disaggregated" else ("drain",):
                yield preset, layout, schedule


@pytest.mark.parametrize("preset,layout,schedule", list(_every_pair()))
def test_no_matched_row_of_any_preset_layout_and_schedule_hides_different_work(preset, layout, schedule):
    """Every preset x layout x schedule, both backends: rows that name a framework's default are never matched (two
    SGLang releases' defaults are not one setting), and the rows where the two sides do different work are declared
    with their note."""
    data = with_overrides(load_preset(preset), layout=layout).model_dump(mode="json")
    data["placement"]["async_loop"]["schedule"] = schedule
    spec = BenchmarkSpec.model_validate(data)
    train, val = converted_paths(spec, "/out/data")
    prepare = prepare_step(spec, "/out/data", "run.py")["argv"]
    for backend in BACKENDS:
        miles = build_miles_launch(spec, backend, layout).argv
        verl = build_verl_launch(spec, backend, layout, VerlData(train, val)).argv
        rows = {r.knob: r for r in _build(miles, verl, backend, layout, prepare)}
        matched = {knob: r for knob, r in rows.items() if r.status == "matched"}
        assert not [k for k, r in matched.items() if "default" in str(r.candidate)], (backend, layout)
        for knob, where in DIFFERENT_WORK.items():
            if {layout, schedule} & where:
                assert rows[knob].status == "asymmetry" and rows[knob].note, (knob, backend, layout, schedule)


class TestMatchedLaunches:
    @pytest.mark.parametrize("preset", preset_names())
    @pytest.mark.parametrize("backend", BACKENDS)
    @pytest.mark.parametrize("layout", LAYOUTS)
    def test_every_emitted_pair_matches_or_declares(self, preset, backend, layout):
        rows = _parity(preset, backend, layout)
        assert {r.status for r in rows} <= {"matched", "asymmetry"}
        assert all(r.note for r in rows if r.status == "asymmetry")

    def test_qwen3_1_7b_megatron_colocated_has_only_the_inherent_asymmetries(self):
        rows = _parity(backend="megatron")
        assert {r.knob for r in rows if r.status == "asymmetry"} == {
            "sampling_seed",
            "client_concurrency",
            "completion_wait",
            "metric_sink",
            "weight_cpu_backup",
            "rollout_engine_version",
            "rollout_memory_release",
            "cuda_graph_max_bs",
        }

    @pytest.mark.parametrize("preset", preset_names())
    @pytest.mark.parametrize("backend", ["fsdp", "megatron"])
    def test_disaggregated_loop_and_staleness_rows_are_matched(self, preset, backend):
        """Miles train_async.py vs VERL separate_async (warm-up 1, threshold 2, wait): one-step off-policy both."""
        rows = {r.knob: r for r in _parity(preset, backend=backend, layout="disaggregated")}
        for knob in ("layout", "rollout_loop", "max_policy_lag", "weight_sync_cadence"):
            assert rows[knob].status == "matched", knob
        assert (
            rows["rollout_loop"].candidate.startswith("one-step off-policy") and rows["max_policy_lag"].reference == 1
        )
        partial = rows["partial_rollout"]
        assert partial.status == "asymmetry" and "abort" in partial.reference and "cannot be matched" in partial.note

    def test_the_old_synchronous_verl_staleness_is_caught(self):
        """Warm-up 0 + threshold 1 (wait) makes separate_async wait for every prompt: not Miles's async loop."""
        miles, verl, convert = _launches("smoke", "fsdp", "disaggregated")
        old = both(
            v_set("trainer.v1.separate_async.num_warmup_batches=0"),
            v_set("trainer.v1.sampler.max_off_policy_threshold=1"),
        )
        with pytest.raises(ParityError, match="rollout_loop: miles='one-step off-policy.*verl='synchronous'"):
            _build(list(miles), old(list(verl)), "fsdp", "disaggregated", list(convert))

    def test_a_synchronous_miles_entry_point_is_caught(self):
        miles, verl, convert = _launches("smoke", "fsdp", "disaggregated")
        sync_miles = [token.replace("train_async.py", "train.py") for token in miles]
        with pytest.raises(ParityError, match="rollout_loop"):
            _build(sync_miles, list(verl), "fsdp", "disaggregated", list(convert))

    def test_bridge_mode_router_dtype_is_what_the_model_uses(self):
        """--moe-router-dtype never reaches the bridge provider: a VERL fp32 router would be a mismatch."""
        miles, verl, convert = _launches("qwen3-30b-a3b", "megatron", "colocate")
        fp32 = v_set(f"+{AR}.actor.megatron.override_transformer_config.moe_router_dtype=fp32")
        with pytest.raises(ParityError, match="moe_router_dtype: miles='model dtype \\(bf16\\)' verl='fp32'"):
            _build(list(miles), fp32(list(verl)), "megatron", "colocate", list(convert))
        with_flag = [*miles, "--moe-router-dtype", "fp32"]
        assert parse_miles(with_flag, "megatron")["moe_router_dtype"] == "model dtype (bf16)"

    def test_values_are_read_from_the_launches_not_the_spec(self):
        """Editing only the emitted argv changes the parsed knob."""
        miles, verl, _ = (list(x) for x in _launches("smoke", "fsdp", "colocate"))
        assert parse_miles(m_drop("--rollout-top-p")(miles) + ["--rollout-top-p", "0.5"], "fsdp")["top_p"] == 0.5
        assert parse_verl(v_set(f"{AR}.rollout.top_p=0.5")(verl))["top_p"] == 0.5


# (id, preset, backend, miles edit, verl edit, knob that must be reported)
GOTCHAS = [
    (
        "batch units: mini-batch in samples",
        "fsdp",
        None,
        v_set(f"{AR}.actor.ppo_mini_batch_size=1024"),
        "samples_per_optimizer_step",
    ),
    (
        "clip_ratio instead of clip_ratio_high",
        "fsdp",
        None,
        both(v_drop(f"{AR}.actor.clip_ratio_high"), v_set(f"{AR}.actor.clip_ratio=0.28")),
        "clip_high",
    ),
    ("dual clip left at VERL's 3.0", "fsdp", None, v_drop(f"{AR}.actor.clip_ratio_c"), "dual_clip"),
    (
        "loss aggregation: Miles per-sample mean",
        "fsdp",
        m_drop("--calculate-per-token-loss"),
        None,
        "loss_aggregation",
    ),
    (
        "loss aggregation: VERL seq-mean-token-sum",
        "megatron",
        None,
        v_set(f"{AR}.actor.loss_agg_mode=seq-mean-token-sum"),
        "loss_aggregation",
    ),
    ("KL loss boolean on one side", "fsdp", m_add("--use-kl-loss"), None, "kl_loss"),
    (
        "KL type k1 vs low_var_kl",
        "fsdp",
        m_add("--use-kl-loss", "--kl-loss-type", "k1"),
        v_set(f"{AR}.actor.use_kl_loss=True"),
        "kl_loss_type",
    ),
    (
        "reference model from VERL's KL-in-reward",
        "fsdp",
        None,
        v_set("algorithm.use_kl_in_reward=True"),
        "reference_model",
    ),
    ("legacy reward keys", "fsdp", None, v_set("reward_model.reward_manager=dapo"), "dead_or_ignored_keys"),
    ("VERL reward manager dapo", "fsdp", None, v_set("reward.reward_manager.name=dapo"), "reward_scorer"),
    (
        "Miles scorer deepscaler",
        "fsdp",
        both(m_drop("--rm-type"), m_add("--rm-type", "deepscaler")),
        None,
        "reward_scorer",
    ),
    (
        "Megatron betas through optim.betas (ignored)",
        "megatron",
        None,
        both(
            v_drop(f"{AR}.actor.optim.override_optimizer_config.adam_beta2"),
            v_set(f"{AR}.actor.optim.betas=[0.9,0.98]"),
        ),
        "adam_beta2",
    ),
    ("VERL rollout TP default 2", "fsdp", None, v_drop(f"{AR}.rollout.tensor_model_parallel_size"), "gpus_per_engine"),
    ("VERL memory fraction default 0.5", "fsdp", None, v_drop(f"{AR}.rollout.gpu_memory_utilization"), "mem_fraction"),
    ("VERL max_num_seqs default 256", "fsdp", None, v_drop(f"{AR}.rollout.max_num_seqs"), "max_running_requests"),
    (
        "Miles running-request cap left to SGLang",
        "megatron",
        m_drop("--sglang-max-running-requests"),
        None,
        "max_running_requests",
    ),
    (
        "VERL chunked prefill through a vLLM-only key",
        "fsdp",
        None,
        both(
            v_drop(f"{AR}.rollout.engine_kwargs.sglang.chunked_prefill_size"),
            v_set(f"{AR}.rollout.max_num_batched_tokens=4096"),
        ),
        "chunked_prefill",
    ),
    (
        "VERL attention backend default flashinfer",
        "fsdp",
        None,
        v_drop(f"{AR}.rollout.engine_kwargs.sglang.attention_backend"),
        "rollout_attention_backend",
    ),
    ("filter_overlong_prompts off", "fsdp", None, v_drop("data.filter_overlong_prompts"), "overlong_prompts"),
    ("VERL val_before_train default", "fsdp", None, v_drop("trainer.val_before_train"), "evaluation"),
    ("VERL resume_mode auto", "fsdp", None, v_drop("trainer.resume_mode"), "resume"),
    ("VERL save_freq", "megatron", None, v_set("trainer.save_freq=5"), "checkpoint_save"),
    ("VERL logger default wandb", "fsdp", None, v_drop("trainer.logger"), "external_trackers"),
    ("Miles Megatron adam-beta2 default 0.999", "megatron", m_drop("--adam-beta2"), None, "adam_beta2"),
    ("Miles Megatron weight-decay default 0.01", "megatron", m_drop("--weight-decay"), None, "weight_decay"),
    ("Miles Megatron lr-decay-style default linear", "megatron", m_drop("--lr-decay-style"), None, "lr_schedule"),
    ("Miles FSDP adam-beta2 default 0.95", "fsdp", m_drop("--adam-beta2"), None, "adam_beta2"),
    ("Miles Megatron dropout default 0.1", "megatron", m_drop("--hidden-dropout"), None, "dropout"),
    ("Miles --dump-details", "fsdp", m_add("--dump-details", "/tmp/d"), None, "rollout_dumps"),
    ("Miles --use-fault-tolerance", "megatron", m_add("--use-fault-tolerance"), None, "health_checks"),
    ("Miles --rollout-shuffle", "fsdp", m_add("--rollout-shuffle"), None, "prompt_order"),
    ("VERL shuffled dataloader", "fsdp", None, v_drop("data.shuffle"), "prompt_order"),
    ("Miles eval", "fsdp", m_add("--eval-interval", "20"), None, "evaluation"),
    ("Miles wandb", "fsdp", m_add("--use-wandb"), None, "external_trackers"),
    ("Miles resume from --load", "megatron", m_add("--load", "/ckpt"), None, "resume"),
    ("VERL dead actor.grad_clip", "fsdp", None, v_set(f"{AR}.actor.grad_clip=0.5"), "dead_or_ignored_keys"),
    (
        "Miles dead --log-probs-max-tokens-per-gpu",
        "fsdp",
        m_add("--log-probs-max-tokens-per-gpu", "4096"),
        None,
        "dead_or_ignored_keys",
    ),
    ("VERL FSDP1", "fsdp", None, v_drop(f"{AR}.actor.strategy"), "fsdp_version"),
    (
        "VERL no gradient checkpointing",
        "fsdp",
        None,
        v_set(f"{AR}.model.enable_gradient_checkpointing=False"),
        "gradient_checkpointing",
    ),
    (
        "VERL actor resident during rollout",
        "fsdp",
        None,
        v_set(f"{AR}.actor.fsdp_config.param_offload=False"),
        "train_state_offload",
    ),
    (
        "VERL Megatron sequence parallel default on",
        "megatron",
        m_drop("--sequence-parallel"),
        None,
        "sequence_parallel",
    ),
    ("Miles balance-data off", "fsdp", m_drop("--balance-data"), None, "dp_load_balancing"),
    (
        "VERL bypass mode (rollout log-probs)",
        "fsdp",
        None,
        v_set("algorithm.rollout_correction.bypass_mode=True"),
        "old_logprobs",
    ),
    (
        "token budget differs",
        "megatron",
        None,
        v_set(f"{AR}.actor.ppo_max_token_len_per_gpu=16384"),
        "max_tokens_per_gpu",
    ),
    (
        "log-prob budget differs",
        "fsdp",
        None,
        v_set(f"{AR}.rollout.log_prob_max_token_len_per_gpu=4096"),
        "logprob_max_tokens_per_gpu",
    ),
    ("steps differ", "fsdp", None, v_set("trainer.total_training_steps=20"), "steps"),
    (
        "weight sync bucket default 2048 MiB",
        "fsdp",
        None,
        v_drop(f"{AR}.rollout.checkpoint_engine.update_weights_bucket_megabytes"),
        "weight_sync_bucket_mb",
    ),
    (
        "Miles grads reduced in bf16",
        "megatron",
        m_drop("--accumulate-allreduce-grads-in-fp32"),
        None,
        "grad_reduce_dtype",
    ),
    (
        "chat template kwargs on one side",
        "fsdp",
        None,
        v_set("+data.apply_chat_template_kwargs.enable_thinking=False"),
        "chat_template",
    ),
    ("Miles max response length unset", "fsdp", m_drop("--rollout-max-response-len"), None, "max_response_tokens"),
    ("Miles GRPO std normalization off", "fsdp", m_add("--disable-grpo-std-normalization"), None, "std_normalization"),
    ("VERL entropy bonus", "megatron", None, v_set(f"{AR}.actor.entropy_coeff=0.001"), "entropy_coef"),
]


class TestGotchasAreCaught:
    @pytest.mark.parametrize(
        "backend,miles_edit,verl_edit,knob", [g[1:] for g in GOTCHAS], ids=[g[0] for g in GOTCHAS]
    )
    def test_planted_gotcha_raises(self, backend, miles_edit, verl_edit, knob):
        with pytest.raises(ParityError) as info:
            _parity(backend=backend, miles_edit=miles_edit, verl_edit=verl_edit)
        assert f"{knob}:" in str(info.value)
        assert any(r.knob == knob and r.status == "MISMATCH" for r in info.value.rows)

    def test_etp_left_to_verl_default_follows_tp(self):
        """VERL: expert_tensor_parallel_size null means ETP = TP (4 on the MoE preset), Miles pins 1."""
        with pytest.raises(ParityError, match="etp: miles=1 verl=4"):
            _parity("qwen3-30b-a3b", "megatron", verl_edit=v_drop(f"{AR}.actor.megatron.expert_tensor_parallel_size"))

    def test_moe_kernels_must_match(self):
        with pytest.raises(ParityError, match="moe_kernels"):
            _parity(
                "qwen3-30b-a3b",
                "megatron",
                verl_edit=v_drop(f"{AR}.actor.megatron.override_transformer_config.moe_grouped_gemm"),
            )


class TestVerlDefaults:
    @pytest.mark.parametrize("backend", BACKENDS)
    def test_embedded_defaults_equal_verl_0_9_1(self, verl_root, backend):
        """The parser's defaults must be the wheel's, or a silent default would read as matched."""
        overrides = [f"{AR}.rollout.name=sglang"] + (["model_engine=megatron"] if backend == "megatron" else [])
        cfg = compose_overrides(overrides, verl_root)
        engine = VERL_MEGATRON_DEFAULTS if backend == "megatron" else VERL_FSDP_DEFAULTS
        for key, expected in {**VERL_DEFAULTS, **engine}.items():
            if key == f"{AR}.rollout.name":
                continue
            actual = OmegaConf.select(cfg, key)
            actual = OmegaConf.to_container(actual) if OmegaConf.is_config(actual) else actual
            assert actual == expected, f"{backend}: {key} is {actual!r} in VERL 0.9.1, parity assumes {expected!r}"

    def test_megatron_optimizer_override_is_empty_by_default(self, verl_root):
        """So betas/eps fall back to Megatron-Core's OptimizerConfig defaults (MCORE_ADAM)."""
        cfg = compose_overrides([f"{AR}.rollout.name=sglang", "model_engine=megatron"], verl_root)
        assert OmegaConf.to_container(cfg.actor_rollout_ref.actor.optim.override_optimizer_config) == {}
        assert MCORE_ADAM["adam_beta2"] == 0.999


class TestOutputs:
    def test_parity_json_and_markdown(self):
        rows = _parity(backend="megatron")
        pair = ParityPair(backend="megatron", layout="colocate", candidate_cell="m", reference_cell="v", rows=rows)
        parity = parity_file("abc123abc123", [pair])
        counts = parity.pairs[0].counts
        assert counts["MISMATCH"] == 0 and counts["asymmetry"] == 8
        assert counts["matched"] + 8 == len(parity.pairs[0].rows)
        text = parity_markdown(parity, "qwen3-1.7b-base", registry.option_pair(compare_verl=True, miles_version=None))
        clip_high = "| grpo | clip_high | 0.28 | 0.28 | matched | `--eps-clip-high 0.28` | "
        assert clip_high + "`actor_rollout_ref.actor.clip_ratio_high=0.28` |  |" in text
        assert "| rollout | completion_wait | event-driven | 2 s replay-buffer poll | asymmetry |" in text
        optimizer = (
            "| optimizer | optimizer | adamw | adamw | matched | `--optimizer adam` | not set: framework default |"
        )
        assert optimizer in text and "Legend:" in text and "docs/benchmark/plan.md#the-parity-table" in text

    def test_hydra_values(self):
        assert parse_hydra_value("[console,file]") == ["console", "file"]
        assert parse_hydra_value("{eps:1e-08}") == {"eps": 1e-8}
        assert parse_hydra_value("1000000000.0") == 1e9 and parse_hydra_value("null") is None
        assert parse_hydra_value("True") is True and parse_hydra_value("fsdp2") == "fsdp2"
        for text in ("/out/a,b=c(d)", '/o/it\'s "q" ${x} back\\slash\\', "/o/new\nline"):
            assert parse_hydra_value(hydra_string(text)) == text

    def test_miles_flag_split_keeps_values(self):
        assert split_flags(["python3", "x/train.py", "--a", "1", "--b", "--c", "x", "y"]) == [
            ("--a", ["1"]),
            ("--b", []),
            ("--c", ["x", "y"]),
        ]


class TestReleasedMilesEngineRows:
    """A released Miles target's engine rows come from the SGLang it bundles, not from the source target's fork:
    miles-rl 0.0.2 runs SGLang 0.5.12 and, under --colocate, turns its piecewise prefill graphs off itself."""

    @staticmethod
    def rows(layout: str, tmp_path) -> dict:
        from scripts.benchmark.plan.build import PlanOptions, build_plan

        sides = registry.option_pair(compare_verl=True, miles_version="0.0.2")
        options = PlanOptions(backends=("megatron",), layout=layout, output_dir=tmp_path, sides=sides)
        plan = build_plan(load_preset("qwen3-4b"), "qwen3-4b", options)
        (pair,) = plan.parity.pairs
        return {row.knob: row for row in pair.rows}

    @pytest.mark.parametrize("layout", LAYOUTS)
    def test_the_engine_and_prefill_rows_follow_the_bundled_sglang(self, layout, tmp_path):
        rows = self.rows(layout, tmp_path)
        version, prefill = rows["rollout_engine_version"], rows["prefill_cuda_graphs"]
        assert version.candidate == "sglang 0.5.12 (bundled with this Miles release)"
        expected = "off" if layout == "colocate" else "piecewise (sglang 0.5.12 default)"
        assert (prefill.candidate, prefill.reference, prefill.status) == (expected, expected, "matched")

    def test_an_explicit_piecewise_switch_of_the_release_is_read(self):
        miles = registry.get("miles")
        argv = ["train.py", "--colocate", "--sglang-enforce-piecewise-cuda-graph"]
        assert miles.parity_knobs(argv, "megatron", None, "0.0.2")["prefill_cuda_graphs"].startswith("piecewise")
        assert miles.parity_knobs(["train.py"], "megatron", None, "0.0.2")["prefill_cuda_graphs"].startswith("piece")
        assert (
            miles.parity_knobs(["train.py", "--colocate"], "megatron", None, "0.0.2")["prefill_cuda_graphs"] == "off"
        )


class TestMetricSinkRow:
    """The metric_sink row says what each planned cell writes: the tracking backend where its target has it."""

    @staticmethod
    def sink_rows(miles_version: str | None, tmp_path, backends=BACKENDS) -> dict[str, tuple[str, str]]:
        from scripts.benchmark.plan.build import PlanOptions, build_plan

        sides = registry.option_pair(compare_verl=True, miles_version=miles_version)
        options = PlanOptions(backends=backends, layout="colocate", output_dir=tmp_path, sides=sides)
        plan = build_plan(load_preset("smoke"), "smoke", options)
        sinks = {cell["id"]: cell["sink"]["format"] for cell in plan.data["cells"]}
        return {
            pair.candidate_cell: (row.candidate, sinks[pair.candidate_cell])
            for pair in plan.parity.pairs
            for row in pair.rows
            if row.knob == "metric_sink"
        }

    def test_the_in_tree_target_says_tracking_backend(self, tmp_path):
        rows = self.sink_rows(None, tmp_path)
        expected = ("benchmark tracking backend (BENCH_TRACKING_DIR)", "miles-tracking")
        assert rows and all(row == expected for row in rows.values()), rows

    def test_the_released_miles_says_stdout(self, tmp_path):
        rows = self.sink_rows("0.0.2", tmp_path, backends=("megatron",))  # 0.0.2 plans no FSDP cell
        assert rows and all(row == ("stdout", "miles-stdout") for row in rows.values()), rows

    def test_two_targets_of_miles_with_different_sinks_declare_it(self, tmp_path):
        from scripts.benchmark.plan.build import PlanOptions, build_plan

        sides = registry.make_pair(
            registry.side_arg("candidate", "miles"), registry.side_arg("reference", "miles@0.0.2")
        )
        options = PlanOptions(backends=("megatron",), layout="colocate", output_dir=tmp_path, sides=sides)
        plan = build_plan(load_preset("smoke"), "smoke", options)
        (row,) = [r for pair in plan.parity.pairs for r in pair.rows if r.knob == "metric_sink"]
        assert (row.candidate, row.reference, row.status) == (
            "benchmark tracking backend (BENCH_TRACKING_DIR)",
            "stdout",
            "asymmetry",
        )
        assert "same records" in row.note
