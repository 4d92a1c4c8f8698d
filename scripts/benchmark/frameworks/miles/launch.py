"""The Miles launch of one benchmark cell: train.py (colocate) or train_async.py (disaggregated; with --fully-async
when spec.placement.async_loop.schedule is continuous) argv per backend,
submitted as a Ray job like Miles's own launchers (miles/utils/external_utils/command_utils.py::execute_train),
built from named blocks.

- `build_miles_launch(spec, backend, layout, paths, target, side) -> FrameworkLaunch`; `MilesPaths` (Miles
  checkout, Megatron-LM, Ray addresses) is where the GPU node keeps things; `side` is the plan side's name (two
  sides of Miles: `miles` and `miles-base`).
- Blocks, in order: ckpt, rollout, perf, grpo, optimizer, sglang, backend (fsdp | megatron incl. the architecture
  args that Miles's scripts/models/<model>.py supply, emitted from the spec's HF config), placement, sink, tracking.
- Every value is pinned where the two Miles backends' defaults differ (adam beta2, weight decay, lr decay style,
  Megatron dropout 0.1); only flags that exist for the backend are emitted (checked by miles_flags).
- Deliberately absent: eval (--eval-*), --save/--load/--ref-load (no checkpoint write, no resume), --dump-details
  (disk writes inside the timed rollout), wandb unless the spec asks (tracking.wandb), --use-fault-tolerance (a
  /health_generate probe every 30 s per engine and an engine-recovery call before every weight update: overhead VERL
  does not have), --use-kl-loss / ref model unless the spec asks, --rollout-shuffle (one fixed prompt order for both
  frameworks).
- Sink, per target (`miles_sink`): a Miles with the benchmark tracking backend (the in-tree target) gets
  BENCH_TRACKING_DIR=${BENCH_CELL_DIR}/sink/miles-tracking, exported by the cell script before the Ray head starts
  and in the job's runtime env, and the sink `miles-tracking` (that folder); a Miles without it (miles-rl 0.0.2)
  keeps the job's stdout (the runner's ${BENCH_CELL_DIR}/log.txt), where Miles prints every `perf N:` dict anyway. The
  backend's cost is one file write per log call (test_bench_tracking). No debug or event option is passed (no
  --save-debug-event-data, no MILES_EXPERIMENTAL_FT_TRAINER): nothing the harness reads makes Miles do work per
  step (`EXTRA_WORK_SWITCHES`, tested).
- Train-only plans (`recording_args`): the recording pass adds `--save-debug-rollout-data ROOT/miles/{rollout_id}.pt`
  (Miles pickles each rollout's samples, `save_debug_rollout_data`); a replay cell adds
  `--load-debug-rollout-data` with the same template, which makes Miles train only (debug_train_only: no SGLang
  engine, no weight update; arguments.py, rollout_manager.py).
- Tracking (only with tracking.wandb): --use-wandb --wandb-project P --wandb-group <cell id>
  --disable-wandb-random-suffix; never --wandb-key: wandb reads WANDB_API_KEY, which the Ray head (and so the job)
  inherits from the runner's environment.

Caveats:
- The Megatron cell loads the HF checkpoint through Megatron-Bridge (--megatron-to-hf-mode bridge), as VERL does with
  mbridge; the stock launcher converts to torch_dist first and passes --load, which this harness avoids (no load).
- No `pkill`: the Ray head is started by the cell script in its own session and only that process group is stopped.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from scripts.benchmark.frameworks.launch import BENCH_CELL_DIR, FrameworkLaunch, RecordingPass
from scripts.benchmark.frameworks.miles.recording import debug_data_template
from scripts.benchmark.frameworks.miles.versions import DEFAULT_MILES_TARGET, MilesTarget, miles_target
from scripts.benchmark.frameworks.sglang_version import cuda_graph_max_bs_key
from scripts.benchmark.spec import Backend, BenchmarkSpec, Layout

from miles.utils.bench_flops import moe_layer_flags
from miles.utils.bench_tracking import BENCH_TRACKING_DIR_ENV

SINK_LOG = f"{BENCH_CELL_DIR}/log.txt"
"""The runner writes the job's merged stdout/stderr here; the Miles reader takes the perf/rollout lines from it."""
TRACKING_DIR = f"{BENCH_CELL_DIR}/sink/miles-tracking"
"""Where a Miles with the benchmark tracking backend writes its per-process files (BENCH_TRACKING_DIR)."""
ENTRY_POINTS = {"colocate": "train.py", "disaggregated": "train_async.py"}
EXTRA_WORK_SWITCHES: dict[str, str] = {
    "--save-debug-event-data": "event logger: a JSONL append per tracking.log call (and, under the FT trainer, an "
    "engine weight checksum after every weight update)",
    "--dump-details": "implies every --save-debug-*-data dump and the event logger",
    "--save-debug-rollout-data": "pickles every rollout to disk",
    "--save-debug-train-data": "pickles every train batch to disk after the train timer",
    "--save-debug-trajectory-data": "writes trajectories to disk",
    "--enable-witness": "witness ids and per-sample events",
    "--enable-event-analyzer": "event analysis at every step (FT trainer) and at shutdown",
    "--save-local-weight-checksum": "checksums the local weights after each update",
    "--check-weight-update-equal": "compares weights after each update",
    "--use-fault-tolerance": "health probes every 30 s and engine recovery before every weight update",
    "MILES_EXPERIMENTAL_FT_TRAINER": "(env) the v2 train group, which checksums engine weights after each update",
}
"""Miles switches whose code path adds work per step; the harness passes none of them (test_miles_launch)."""
RAY_DASHBOARD = "http://127.0.0.1:8265"


@dataclass(frozen=True)
class MilesPaths:
    miles_root: str = "/root/miles"
    megatron_root: str = "/root/Megatron-LM"
    ray_dashboard: str = RAY_DASHBOARD

    @classmethod
    def from_env(cls) -> MilesPaths:
        return cls(
            miles_root=os.environ.get("MILES_ROOT", cls.miles_root),
            megatron_root=os.environ.get("MEGATRON_ROOT", cls.megatron_root),
        )


def miles_cuda_graph_flag(sglang_version: str) -> str:
    """Miles re-registers SGLang's CLI with a --sglang- prefix: the field name, dashed."""
    return "--sglang-" + cuda_graph_max_bs_key(sglang_version).replace("_", "-")


def flag_value(value: float | int | str) -> str:
    """Numbers as Python writes them (1e-06, 0.0): the parity parser reads them back with float()/int()."""
    return str(value)


def prompt_data_arg(spec: BenchmarkSpec) -> str:
    return f"{spec.data.prompt_data}@[{spec.data.start}:{spec.data.end}]"


def _ckpt(spec: BenchmarkSpec) -> list[str]:
    return ["--hf-checkpoint", spec.model.hf_checkpoint]


def _rollout(spec: BenchmarkSpec) -> list[str]:
    data, batch, sampling = spec.data, spec.batch, spec.sampling
    argv = ["--prompt-data", prompt_data_arg(spec), "--input-key", data.input_key, "--label-key", data.label_key]
    argv += ["--apply-chat-template"]
    if data.apply_chat_template_kwargs:
        argv += ["--apply-chat-template-kwargs", json.dumps(data.apply_chat_template_kwargs, sort_keys=True)]
    argv += ["--rollout-max-prompt-len", flag_value(spec.lengths.max_prompt)]
    argv += ["--rm-type", "dapo", "--reward-key", "score"]
    argv += [
        "--num-rollout",
        flag_value(spec.run.num_steps),
        "--rollout-batch-size",
        flag_value(batch.prompts_per_step),
    ]
    argv += ["--n-samples-per-prompt", flag_value(batch.samples_per_prompt)]
    argv += ["--rollout-max-response-len", flag_value(spec.lengths.max_response)]
    argv += ["--rollout-temperature", flag_value(sampling.temperature), "--rollout-top-p", flag_value(sampling.top_p)]
    argv += ["--rollout-top-k", flag_value(sampling.top_k)]
    argv += ["--global-batch-size", flag_value(batch.samples_per_optimizer_step), "--balance-data"]
    argv += ["--rollout-seed", flag_value(spec.run.rollout_seed)]
    return argv


def _perf(spec: BenchmarkSpec, backend: Backend) -> list[str]:
    return ["--use-dynamic-batch-size", "--max-tokens-per-gpu", flag_value(spec.max_tokens_per_gpu(backend))]


def _grpo(spec: BenchmarkSpec) -> list[str]:
    grpo = spec.grpo
    argv = ["--advantage-estimator", grpo.advantage_estimator]
    argv += ["--eps-clip", flag_value(grpo.eps_clip), "--eps-clip-high", flag_value(grpo.eps_clip_high)]
    if grpo.dual_clip_c is not None:
        argv += ["--eps-clip-c", flag_value(grpo.dual_clip_c)]
    if grpo.use_kl_loss:
        argv += ["--use-kl-loss"]
    argv += ["--kl-loss-coef", flag_value(grpo.kl_loss_coef), "--kl-loss-type", grpo.kl_loss_type, "--kl-coef", "0.0"]
    argv += ["--entropy-coef", flag_value(grpo.entropy_coef)]
    if grpo.loss_aggregation == "token-mean":
        argv += ["--calculate-per-token-loss"]
    if not grpo.std_normalization:
        argv += ["--disable-grpo-std-normalization"]
    return argv


def _optimizer(spec: BenchmarkSpec) -> list[str]:
    opt = spec.optimizer
    argv = ["--optimizer", "adam", "--lr", flag_value(opt.lr), "--lr-decay-style", opt.lr_schedule]
    argv += ["--lr-warmup-iters", flag_value(opt.warmup_steps), "--weight-decay", flag_value(opt.weight_decay)]
    argv += ["--adam-beta1", flag_value(opt.adam_beta1), "--adam-beta2", flag_value(opt.adam_beta2)]
    argv += [
        "--adam-eps",
        flag_value(opt.adam_eps),
        "--clip-grad",
        flag_value(opt.clip_grad),
        "--seed",
        flag_value(spec.run.seed),
    ]
    return argv


def _sglang(spec: BenchmarkSpec, target: MilesTarget) -> list[str]:
    """SGLang knobs in the spelling of the SGLang Miles runs (the target's bundled SGLang, else
    spec.rollout.sglang_versions.miles)."""
    ro = spec.rollout
    argv = ["--rollout-num-gpus-per-engine", flag_value(ro.gpus_per_engine)]
    argv += ["--sglang-mem-fraction-static", flag_value(ro.mem_fraction)]
    argv += ["--sglang-max-running-requests", flag_value(ro.max_running_requests)]
    argv += ["--sglang-server-concurrency", flag_value(ro.max_running_requests)]
    if ro.chunked_prefill_size is not None:
        argv += ["--sglang-chunked-prefill-size", flag_value(ro.chunked_prefill_size)]
    argv += ["--sglang-attention-backend", ro.attention_backend]
    if not ro.cuda_graphs:
        argv += ["--sglang-disable-cuda-graph"]
    elif ro.cuda_graph_max_bs is not None:
        sglang = target.sglang_version or ro.sglang_versions["miles"]
        argv += [miles_cuda_graph_flag(sglang), flag_value(ro.cuda_graph_max_bs)]
    argv += ["--sglang-decode-log-interval", "1000"]
    argv += ["--update-weight-buffer-size", flag_value(ro.weight_sync_bucket_mb * 1024 * 1024)]
    return argv


def _fsdp(spec: BenchmarkSpec) -> list[str]:
    fsdp = spec.fsdp
    argv = ["--train-backend", "fsdp"]
    argv += ["--gradient-checkpointing" if fsdp.gradient_checkpointing else "--no-gradient-checkpointing"]
    argv += ["--attn-implementation", fsdp.attn_implementation]
    if fsdp.cpu_offload:
        argv += ["--fsdp-cpu-offload"]
    argv += ["--train-env-vars", json.dumps({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})]
    return argv


def megatron_architecture_args(hf: dict) -> list[str]:
    """What scripts/models/qwen3-*.py hand to Megatron, derived from the HF config instead of a per-model file."""
    argv = [
        "--swiglu",
        "--num-layers",
        flag_value(hf["num_hidden_layers"]),
        "--hidden-size",
        flag_value(hf["hidden_size"]),
    ]
    argv += ["--ffn-hidden-size", flag_value(hf["intermediate_size"])]
    argv += ["--num-attention-heads", flag_value(hf["num_attention_heads"]), "--group-query-attention"]
    argv += ["--num-query-groups", flag_value(hf["num_key_value_heads"])]
    argv += ["--kv-channels", flag_value(hf.get("head_dim", hf["hidden_size"] // hf["num_attention_heads"]))]
    argv += ["--use-rotary-position-embeddings", "--disable-bias-linear", "--normalization", "RMSNorm"]
    argv += [
        "--norm-epsilon",
        flag_value(hf.get("rms_norm_eps", 1e-6)),
        "--rotary-base",
        flag_value(hf.get("rope_theta", 10000)),
    ]
    argv += ["--vocab-size", flag_value(hf["vocab_size"]), "--qk-layernorm"]
    if not hf.get("tie_word_embeddings", False):
        argv += ["--untie-embeddings-and-output-weights"]
    if hf.get("model_type") == "qwen3_moe":
        argv += _moe_architecture_args(hf)
    return argv


def _moe_architecture_args(hf: dict) -> list[str]:
    freq = [int(is_moe) for is_moe in moe_layer_flags(hf)]
    argv = ["--moe-ffn-hidden-size", flag_value(hf["moe_intermediate_size"]), "--moe-router-score-function", "softmax"]
    argv += ["--moe-token-dispatcher-type", "alltoall", "--moe-router-topk", flag_value(hf["num_experts_per_tok"])]
    argv += ["--moe-layer-freq", "[" + ",".join(map(str, freq)) + "]", "--num-experts", flag_value(hf["num_experts"])]
    # No --moe-router-dtype: bridge mode never copies it onto the model provider (the router runs in bf16).
    argv += ["--moe-grouped-gemm", "--moe-token-drop-policy", "probs"]
    argv += ["--moe-permute-fusion", "--moe-aux-loss-coeff", "0"]
    return argv


def _megatron(spec: BenchmarkSpec) -> list[str]:
    mg = spec.megatron
    argv = ["--train-backend", "megatron", "--megatron-to-hf-mode", "bridge"]
    argv += megatron_architecture_args(spec.model.hf_config())
    argv += ["--tensor-model-parallel-size", flag_value(mg.tp)]
    argv += ["--sequence-parallel"] if mg.sequence_parallel else []
    argv += ["--pipeline-model-parallel-size", flag_value(mg.pp), "--context-parallel-size", flag_value(mg.cp)]
    argv += ["--expert-model-parallel-size", flag_value(mg.ep), "--expert-tensor-parallel-size", flag_value(mg.etp)]
    if mg.recompute == "full":
        argv += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    argv += ["--attention-dropout", "0.0", "--hidden-dropout", "0.0"]
    argv += ["--accumulate-allreduce-grads-in-fp32", "--attention-softmax-in-fp32"]
    argv += ["--attention-backend", mg.attention_backend]
    if mg.optimizer_cpu_offload:
        argv += ["--optimizer-cpu-offload", "--overlap-cpu-optimizer-d2h-h2d", "--use-precision-aware-optimizer"]
    return argv


def _placement(spec: BenchmarkSpec, layout: Layout) -> list[str]:
    nodes = spec.run.nodes
    argv = [
        "--actor-num-nodes",
        flag_value(nodes),
        "--actor-num-gpus-per-node",
        flag_value(spec.train_gpus(layout) // nodes),
    ]
    argv += ["--num-gpus-per-node", flag_value(spec.gpus_per_node(layout))]
    if layout == "colocate":
        return argv + ["--colocate"]
    loop = spec.placement.async_loop
    argv += ["--rollout-num-gpus", flag_value(spec.rollout_gpus(layout))]
    argv += ["--update-weights-interval", flag_value(loop.weight_sync_every_steps)]
    return argv + (continuous_loop_args(loop.max_policy_lag) if loop.schedule == "continuous" else [])


def continuous_loop_args(max_policy_lag: int) -> list[str]:
    """train_async.py's fully-async loop (FullyAsyncRolloutFn): a persistent producer; SGLang retracts the running
    requests to its waiting queue at a weight update and re-prefills them after it (retract is Miles's default,
    passed so the launch says it). Its data buffer compares a group's oldest weight version with the engines'
    version when the batch is drained, which train_async.py does before the update that precedes the batch's
    training, one version behind the policy that trains it: --max-weight-staleness is the spec's lag bound minus one,
    so that no trained group is further behind the training policy than the bound (fully_async_data_buffer.py)."""
    argv = ["--fully-async", "--pause-generation-mode", "retract"]
    return argv + ["--max-weight-staleness", flag_value(max_policy_lag - 1)]


def _tracking(spec: BenchmarkSpec, backend: Backend, layout: Layout, side: str) -> list[str]:
    if not spec.tracking.wandb:
        return []
    argv = ["--use-wandb", "--wandb-project", spec.tracking.wandb_project]
    return argv + ["--wandb-group", f"{side}-{backend}-{layout}", "--disable-wandb-random-suffix"]


def recording_template(root: str) -> str:
    """Where Miles writes or reads each rollout of a recording: its own `{rollout_id}` template."""
    return debug_data_template(Path(root) / "miles")


def recording_args(recording: RecordingPass) -> list[str]:
    flag = "--save-debug-rollout-data" if recording.role == "record" else "--load-debug-rollout-data"
    return [flag, recording_template(recording.root)]


def miles_train_blocks(
    spec: BenchmarkSpec, backend: Backend, layout: Layout, target: MilesTarget | None = None, side: str = "miles"
) -> dict[str, list[str]]:
    """The named argv blocks; `side` names the plan side (the wandb group is its cell id)."""
    target = target or miles_target(DEFAULT_MILES_TARGET)
    return {
        "ckpt": _ckpt(spec),
        "rollout": _rollout(spec),
        "perf": _perf(spec, backend),
        "grpo": _grpo(spec),
        "optimizer": _optimizer(spec),
        "sglang": _sglang(spec, target),
        "backend": _megatron(spec) if backend == "megatron" else _fsdp(spec),
        "placement": _placement(spec, layout),
        "tracking": _tracking(spec, backend, layout, side),
    }


def miles_sink(target: MilesTarget) -> dict[str, str]:
    """The tracking backend's folder where the target has the backend, else the job's stdout."""
    if target.tracking_backend:
        return {"format": "miles-tracking", "path": TRACKING_DIR}
    return {"format": "miles-stdout", "path": SINK_LOG}


def runtime_env(backend: Backend, paths: MilesPaths, target: MilesTarget | None = None) -> dict:
    env_vars = {"PYTHONUNBUFFERED": "1", "no_proxy": "127.0.0.1", "MASTER_ADDR": "127.0.0.1"}
    if target is not None and target.tracking_backend:
        env_vars[BENCH_TRACKING_DIR_ENV] = TRACKING_DIR
    if backend == "megatron":
        env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    env_vars["PYTHONPATH"] = f"{paths.miles_root}:{paths.megatron_root}"
    return {"env_vars": env_vars}


def build_miles_launch(
    spec: BenchmarkSpec,
    backend: Backend,
    layout: Layout,
    paths: MilesPaths | None = None,
    target: MilesTarget | None = None,
    side: str = "miles",
    recording: RecordingPass | None = None,
) -> FrameworkLaunch:
    paths = paths or MilesPaths()
    target = target or miles_target(DEFAULT_MILES_TARGET)
    blocks = miles_train_blocks(spec, backend, layout, target, side)
    if recording is not None:
        blocks["recording"] = recording_args(recording)
    argv = ["python3", f"{paths.miles_root}/{ENTRY_POINTS[layout]}"] + [
        token for block in blocks.values() for token in block
    ]
    env_json = json.dumps(runtime_env(backend, paths, target), sort_keys=True)
    launch_argv = ["ray", "job", "submit", "--address", paths.ray_dashboard, "--runtime-env-json", env_json, "--"]
    head = ["ray", "start", "--head", "--block", "--node-ip-address", "127.0.0.1"]
    head += ["--num-gpus", str(spec.gpus_per_node(layout)), "--disable-usage-stats"]
    return FrameworkLaunch(
        framework="miles",
        backend=backend,
        layout=layout,
        argv=argv,
        launch_argv=launch_argv + argv,
        env={"PYTHONUNBUFFERED": "1", **({BENCH_TRACKING_DIR_ENV: TRACKING_DIR} if target.tracking_backend else {})},
        sink=miles_sink(target),
        ray_head_argv=head,
        blocks=blocks,
    )
