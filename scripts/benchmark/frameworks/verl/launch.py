"""The sibling VERL 0.9.1 launch of one benchmark cell: `python3 -m verl.trainer.main_ppo <hydra overrides>`.

- `build_verl_launch(spec, backend, layout, data) -> FrameworkLaunch`; `VerlData` names the converted parquet files
  (written by the plan's `prepare` step from the Miles jsonl, rows in Miles's order).
- FSDP uses the default config (FSDP2 via actor.strategy=fsdp2, as Miles's FSDP backend); Megatron adds the group
  override model_engine=megatron.
- Every hyperparameter is converted to VERL's keys and units: prompts vs samples
  (ppo_mini_batch_size = samples_per_optimizer_step / samples_per_prompt), clip_ratio_low/high, the always-on dual
  clip neutralised (clip_ratio_c=1e9) unless the spec asks for one, loss_agg_mode matching Miles's loss, Megatron
  Adam betas/eps through +override_optimizer_config (optim.betas is ignored there), reward under reward.* only.
- Validation, saving and resume are off; trainer.logger=[console,file] with VERL_FILE_LOGGER_PATH in the cell folder
  (plus wandb, project tracking.wandb_project and run name = the cell id, only when the spec's tracking.wandb is on;
  the key comes from WANDB_API_KEY in the environment, never from an override).
- Rollout: SGLang with the same engine size, memory fraction, running-request cap, chunked prefill, attention backend
  and CUDA-graph settings as Miles (the sglang knobs VERL does not expose go through +engine_kwargs.sglang.*);
  colocated, prefill CUDA graphs off as Miles's --colocate turns them off.
- Disaggregated: trainer.v1.trainer_mode=separate_async with a standalone rollout pool, matched to Miles's
  train_async.py (spec.placement.async_loop): one parameter sync per RL step (parameter_sync_step = optimizer steps
  per step, which VERL asserts), num_warmup_batches = max_policy_lag (one batch generating ahead) and
  max_off_policy_threshold = max_policy_lag + 1 with strategy wait (the trainer blocks only on the previous
  step's prompts). With threshold 1 and no warm-up batch the trainer would wait for every in-flight prompt:
  synchronous.
- SGLang keys VERL passes straight to ServerArgs (+engine_kwargs.sglang.*) use the field names of
  spec.rollout.sglang_versions.verl.

- Train-only plans (`recording_overrides`): VERL's own record-and-replay of the v1 trainer, `skip.rollout_tq` with
  action `cache` on every step: with nothing in its dump folder VERL generates and dumps each step's batch
  (`{step}/{inner}/tq_batch.pt`), with a recording there it loads it instead of generating. VERL still starts its
  SGLang engines and syncs weights to them (the parity table says so). `tq_project_dir` is where VERL looks: the
  dump folder, then `{experiment}_{project}/GBS{prompts}_N{n}_in{prompt}_out{response}`.

Caveats:
- Partial rollout cannot be matched: at every weight sync VERL's separate_async aborts the in-flight requests and
  resumes them with the new weights (no switch); Miles's train_async waits for the rollout instead. Declared.
- hydra.run.dir points into the cell folder (through ${oc.env:BENCH_CELL_DIR}, so no path is spliced into an
  override) and Hydra's outputs/ never lands in the launch directory.
- Every free-text value (paths, names) goes through `hydra_string`: Hydra's own quoting, so `,` `=` `(` quotes,
  spaces or `${` in a folder name stay one literal string.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from scripts.benchmark.frameworks.launch import BENCH_CELL_DIR, FrameworkLaunch, RecordingPass
from scripts.benchmark.frameworks.sglang_version import cuda_graph_max_bs_key, prefill_graphs_off_key
from scripts.benchmark.frameworks.verl.recording import project_dump_dir
from scripts.benchmark.spec import Backend, BenchmarkSpec, Layout

AR = "actor_rollout_ref"
SINK_FILE = f"{BENCH_CELL_DIR}/sink/verl.jsonl"
NEUTRAL_DUAL_CLIP = 1.0e9


@dataclass(frozen=True)
class VerlData:
    train_file: str
    val_file: str


_HYDRA_PLAIN = re.compile(r"[A-Za-z0-9_/.+@%-]+")


def hydra_string(value: str) -> str:
    """A string as one literal Hydra override value: bare when plain, else single-quoted with Hydra's escapes
    (backslashes before a quote or the end doubled, quotes escaped, `${` escaped so OmegaConf never resolves it)."""
    if _HYDRA_PLAIN.fullmatch(value) and "${" not in value:
        return value

    def escape(match: re.Match) -> str:
        slashes, follower = match.group(1), match.group(2)
        return slashes * 2 + {"'": "\\'", "${": "\\${", "": ""}[follower]

    return "'" + re.sub(r"(\\*)('|\$\{|$)", escape, value) + "'"


def override_value(value: float | int | bool | str) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    return str(value)


def _data(spec: BenchmarkSpec, data: VerlData) -> list[str]:
    argv = [f"data.train_files={hydra_string(data.train_file)}", f"data.val_files={hydra_string(data.val_file)}"]
    argv += ["data.prompt_key=prompt"]
    argv += [
        f"data.max_prompt_length={spec.lengths.max_prompt}",
        f"data.max_response_length={spec.lengths.max_response}",
    ]
    argv += ["data.filter_overlong_prompts=True", "data.truncation=error", "data.shuffle=False"]
    argv += [f"data.train_batch_size={spec.batch.prompts_per_step}"]
    for key, value in sorted(spec.data.apply_chat_template_kwargs.items()):
        argv += [f"+data.apply_chat_template_kwargs.{key}={override_value(value)}"]
    return argv


def _algorithm(spec: BenchmarkSpec) -> list[str]:
    argv = [f"algorithm.adv_estimator={spec.grpo.advantage_estimator}"]
    argv += [f"algorithm.norm_adv_by_std_in_grpo={override_value(spec.grpo.std_normalization)}"]
    argv += ["algorithm.use_kl_in_reward=False", "algorithm.rollout_correction.bypass_mode=False"]
    return argv


def _actor(spec: BenchmarkSpec, backend: Backend) -> list[str]:
    grpo, batch = spec.grpo, spec.batch
    actor = f"{AR}.actor"
    argv = [f"{AR}.model.path={hydra_string(spec.model.hf_checkpoint)}", f"{AR}.model.use_remove_padding=True"]
    argv += [f"{actor}.ppo_mini_batch_size={batch.samples_per_optimizer_step // batch.samples_per_prompt}"]
    argv += [f"{actor}.ppo_epochs=1", f"{actor}.shuffle=False", f"{actor}.use_dynamic_bsz=True"]
    argv += [f"{actor}.ppo_max_token_len_per_gpu={spec.max_tokens_per_gpu(backend)}"]
    argv += [f"{actor}.clip_ratio_low={grpo.eps_clip}", f"{actor}.clip_ratio_high={grpo.eps_clip_high}"]
    argv += [f"{actor}.clip_ratio_c={grpo.dual_clip_c if grpo.dual_clip_c is not None else NEUTRAL_DUAL_CLIP}"]
    argv += [f"{actor}.loss_agg_mode={grpo.loss_aggregation}", f"{actor}.entropy_coeff={grpo.entropy_coef}"]
    argv += [f"{actor}.use_kl_loss={override_value(grpo.use_kl_loss)}", f"{actor}.kl_loss_coef={grpo.kl_loss_coef}"]
    argv += [f"{actor}.kl_loss_type={grpo.kl_loss_type}"]
    return argv


def _optimizer(spec: BenchmarkSpec, backend: Backend) -> list[str]:
    opt, optim = spec.optimizer, f"{AR}.actor.optim"
    argv = [f"{optim}.lr={opt.lr}", f"{optim}.weight_decay={opt.weight_decay}", f"{optim}.clip_grad={opt.clip_grad}"]
    argv += [f"{optim}.lr_warmup_steps={opt.warmup_steps}", f"{optim}.lr_warmup_steps_ratio=0.0"]
    if backend == "fsdp":
        argv += [f"{optim}.lr_scheduler_type={opt.lr_schedule}", f"{optim}.betas=[{opt.adam_beta1},{opt.adam_beta2}]"]
        return argv + [f"{optim}.override_optimizer_config={{eps:{opt.adam_eps}}}"]
    override = f"+{optim}.override_optimizer_config"
    argv += [f"{optim}.lr_decay_style={opt.lr_schedule}"]
    argv += [f"{override}.adam_beta1={opt.adam_beta1}", f"{override}.adam_beta2={opt.adam_beta2}"]
    argv += [f"{override}.adam_eps={opt.adam_eps}"]
    if spec.megatron.optimizer_cpu_offload:
        argv += [f"{override}.optimizer_cpu_offload=True", f"{override}.overlap_cpu_optimizer_d2h_h2d=True"]
        argv += [f"{override}.optimizer_offload_fraction=1.0", f"{optim}.use_precision_aware_optimizer=True"]
    return argv


def _fsdp(spec: BenchmarkSpec, layout: Layout) -> list[str]:
    fsdp, cfg = spec.fsdp, f"{AR}.actor.fsdp_config"
    offload_between_phases = layout == "colocate" and not fsdp.cpu_offload
    argv = [
        f"{AR}.actor.strategy=fsdp2",
        f"{AR}.model.enable_gradient_checkpointing={override_value(fsdp.gradient_checkpointing)}",
    ]
    argv += [f"+{AR}.model.override_config.attn_implementation={fsdp.attn_implementation}"]
    argv += [
        f"{cfg}.param_offload={override_value(offload_between_phases)}",
        f"{cfg}.optimizer_offload={override_value(offload_between_phases)}",
    ]
    argv += [
        f"{cfg}.offload_policy={override_value(fsdp.cpu_offload)}",
        f"{AR}.actor.ulysses_sequence_parallel_size=1",
    ]
    return argv


def _megatron(spec: BenchmarkSpec, layout: Layout) -> list[str]:
    mg, cfg = spec.megatron, f"{AR}.actor.megatron"
    argv = ["model_engine=megatron", f"{cfg}.tensor_model_parallel_size={mg.tp}"]
    argv += [f"{cfg}.pipeline_model_parallel_size={mg.pp}", f"{cfg}.context_parallel_size={mg.cp}"]
    argv += [f"{cfg}.expert_model_parallel_size={mg.ep}", f"{cfg}.expert_tensor_parallel_size={mg.etp}"]
    argv += [f"{cfg}.sequence_parallel={override_value(mg.sequence_parallel)}", f"{cfg}.seed={spec.run.seed}"]
    argv += [
        f"{cfg}.param_offload={override_value(layout == 'colocate')}",
        f"{cfg}.optimizer_offload={override_value(layout == 'colocate')}",
    ]
    tc = f"{cfg}.override_transformer_config"
    if mg.recompute == "full":
        argv += [f"{tc}.recompute_granularity=full", f"{tc}.recompute_method=uniform", f"{tc}.recompute_num_layers=1"]
    argv += [f"{tc}.attention_backend={mg.attention_backend}"]
    if spec.architecture() == "qwen3_moe":
        argv += [f"+{tc}.moe_grouped_gemm=True", f"+{tc}.moe_permute_fusion=True"]
        argv += [f"+{tc}.moe_token_dispatcher_type=alltoall"]  # router dtype: the model's, as in Miles bridge mode
        argv += [f"+{tc}.moe_aux_loss_coeff=0.0"]
    return argv


def _rollout(spec: BenchmarkSpec, backend: Backend, layout: Layout) -> list[str]:
    """free_cache_engine only where the engine shares GPUs with training: in a standalone pool VERL would release
    and re-allocate the KV pool at every weight update (`release_kv_cache`), which Miles's pool never does.
    Colocated, prefill CUDA graphs are off as Miles turns them off under --colocate (its SGLang would capture them)."""
    ro, sampling, rollout = spec.rollout, spec.sampling, f"{AR}.rollout"
    argv = [f"{rollout}.name={ro.engine}", f"{rollout}.mode=async", f"{rollout}.n={spec.batch.samples_per_prompt}"]
    argv += [f"{rollout}.temperature={sampling.temperature}", f"{rollout}.top_p={sampling.top_p}"]
    argv += [f"{rollout}.top_k={sampling.top_k}"]
    argv += [f"{rollout}.tensor_model_parallel_size={ro.gpus_per_engine}", f"{rollout}.data_parallel_size=1"]
    argv += [
        f"{rollout}.gpu_memory_utilization={ro.mem_fraction}",
        f"{rollout}.enforce_eager={override_value(not ro.cuda_graphs)}",
    ]
    argv += [f"{rollout}.max_num_seqs={ro.max_running_requests}"]
    argv += [f"{rollout}.free_cache_engine={override_value(layout == 'colocate')}"]
    argv += [f"{rollout}.log_prob_use_dynamic_bsz=True"]
    argv += [f"{rollout}.log_prob_max_token_len_per_gpu={spec.max_tokens_per_gpu(backend)}"]
    argv += [f"{rollout}.checkpoint_engine.update_weights_bucket_megabytes={ro.weight_sync_bucket_mb}"]
    sglang = f"+{rollout}.engine_kwargs.sglang"
    if ro.chunked_prefill_size is not None:
        argv += [f"{sglang}.chunked_prefill_size={ro.chunked_prefill_size}"]
    argv += [f"{sglang}.attention_backend={ro.attention_backend}"]
    if ro.cuda_graphs and ro.cuda_graph_max_bs is not None:
        argv += [f"{sglang}.{cuda_graph_max_bs_key(ro.sglang_versions['verl'])}={ro.cuda_graph_max_bs}"]
    if ro.cuda_graphs and layout == "colocate":
        argv += [f"{sglang}.{prefill_graphs_off_key(ro.sglang_versions['verl'])}=True"]
    return argv


def _reward() -> list[str]:
    return ["reward.reward_manager.name=naive", "reward.custom_reward_function.path=null"]


def _placement(spec: BenchmarkSpec, layout: Layout) -> list[str]:
    nodes = spec.run.nodes
    argv = [f"trainer.nnodes={nodes}", f"trainer.n_gpus_per_node={spec.train_gpus(layout) // nodes}"]
    argv += ["trainer.use_v1=True"]
    if layout == "colocate":
        return argv + ["trainer.v1.trainer_mode=sync", f"{AR}.hybrid_engine=True"]
    steps, lag = spec.batch.optimizer_steps_per_step, spec.placement.async_loop.max_policy_lag
    argv += ["trainer.v1.trainer_mode=separate_async", f"{AR}.hybrid_engine=False"]
    argv += [f"{AR}.rollout.nnodes=1", f"{AR}.rollout.n_gpus_per_node={spec.rollout_gpus(layout)}"]
    argv += [f"{AR}.rollout.checkpoint_engine.backend=nccl"]
    argv += [
        f"trainer.v1.separate_async.parameter_sync_step={steps}",
        f"trainer.v1.separate_async.num_warmup_batches={lag}",
    ]
    argv += [
        f"trainer.v1.sampler.max_off_policy_threshold={lag + 1}",
        "trainer.v1.sampler.max_off_policy_strategy=wait",
    ]
    return argv


def experiment_name(backend: Backend, layout: Layout) -> str:
    return f"verl-{backend}-{layout}"


def tq_project_dir(spec: BenchmarkSpec, backend: Backend, layout: Layout, root: str) -> str:
    """The folder RolloutTqSkip reads and writes under the dump folder `root/verl` (its `_get_project_dump_dir`)."""
    batch, lengths = spec.batch, spec.lengths
    where = (experiment_name(backend, layout), spec.tracking.wandb_project, batch.prompts_per_step)
    shape = (batch.samples_per_prompt, lengths.max_prompt, lengths.max_response)
    return str(project_dump_dir(Path(root) / "verl", *where, *shape))


def parameter_sync_step(spec: BenchmarkSpec, layout: Layout) -> int:
    """How many batches VERL's v1 trainer samples per step (each dumped in its own inner folder)."""
    return 1 if layout == "colocate" else spec.batch.optimizer_steps_per_step


def recording_overrides(spec: BenchmarkSpec, recording: RecordingPass) -> list[str]:
    skip, steps = "skip.rollout_tq", ",".join(str(step) for step in range(1, spec.run.num_steps + 1))
    argv = [f"{skip}.enable=True", f"{skip}.dump_dir={hydra_string(recording.root + '/verl')}"]
    return argv + [f"{skip}.steps=[{steps}]", f"{skip}.action=cache"]


def _trainer(spec: BenchmarkSpec, backend: Backend, layout: Layout) -> list[str]:
    argv = [f"trainer.total_training_steps={spec.run.num_steps}", "trainer.total_epochs=1000"]
    argv += ["trainer.val_before_train=False", "trainer.test_freq=-1", "trainer.save_freq=-1"]
    logger = "[console,file,wandb]" if spec.tracking.wandb else "[console,file]"
    argv += ["trainer.resume_mode=disable", "trainer.critic_warmup=0", f"trainer.logger={logger}"]
    argv += [f"trainer.project_name={hydra_string(spec.tracking.wandb_project)}"]
    argv += [f"trainer.experiment_name={experiment_name(backend, layout)}"]
    return argv


def verl_blocks(spec: BenchmarkSpec, backend: Backend, layout: Layout, data: VerlData) -> dict[str, list[str]]:
    return {
        "data": _data(spec, data),
        "algorithm": _algorithm(spec),
        "actor": _actor(spec, backend),
        "optimizer": _optimizer(spec, backend),
        "backend": _megatron(spec, layout) if backend == "megatron" else _fsdp(spec, layout),
        "rollout": _rollout(spec, backend, layout),
        "reward": _reward(),
        "placement": _placement(spec, layout),
        "trainer": _trainer(spec, backend, layout),
        "sink": ["hydra.run.dir=${oc.env:BENCH_CELL_DIR}/hydra"],
    }


def build_verl_launch(
    spec: BenchmarkSpec, backend: Backend, layout: Layout, data: VerlData, recording: RecordingPass | None = None
) -> FrameworkLaunch:
    blocks = verl_blocks(spec, backend, layout, data)
    if recording is not None:
        blocks["recording"] = recording_overrides(spec, recording)
    argv = ["python3", "-m", "verl.trainer.main_ppo"] + [token for block in blocks.values() for token in block]
    return FrameworkLaunch(
        framework="verl",
        backend=backend,
        layout=layout,
        argv=argv,
        launch_argv=list(argv),
        env={"PYTHONUNBUFFERED": "1", "VERL_FILE_LOGGER_PATH": SINK_FILE, "HYDRA_FULL_ERROR": "1"},
        sink={"format": "verl-file-logger", "path": SINK_FILE},
        blocks=blocks,
    )


def overrides_of(argv: list[str]) -> list[str]:
    """The Hydra overrides of a VERL argv (everything after `-m verl.trainer.main_ppo`)."""
    start = argv.index("verl.trainer.main_ppo") + 1 if "verl.trainer.main_ppo" in argv else 0
    return argv[start:]
