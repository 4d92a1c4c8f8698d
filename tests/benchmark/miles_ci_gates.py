"""The benchmark's `register_ci_gate` declarations for Miles's metric-history gate (tests/ci/metric_history): step
time and throughput of the nightly's Miles cell, one series per nightly preset, keyed as
scripts/benchmark/history/ci_record.py writes them (`bench/<preset>/<cell id>/<field>`).

Parsed by Miles's gate through the AST (`parse_ci_gate_specs`: literal top-level calls); the calls are no-ops.
Informational (enforce off): the benchmark's own `check` is the statistical verdict; this band keeps the benchmark
in Miles's dashboards.
"""

from tests.ci.metric_history.register import register_ci_gate

register_ci_gate(
    metric_key="bench/qwen3-1.7b-base/miles-megatron-colocate/step_time_s",
    steps="all",
    constraint={"rel_up": 0.15, "abs_floor_up": 0.0, "rel_down": 0.5, "abs_floor_down": 0.0},
)
register_ci_gate(
    metric_key="bench/qwen3-1.7b-base/miles-megatron-colocate/train_tokens_per_s",
    steps="all",
    constraint={"rel_up": 0.5, "abs_floor_up": 0.0, "rel_down": 0.15, "abs_floor_down": 0.0},
)
register_ci_gate(
    metric_key="bench/qwen3-1.7b-base/miles-megatron-colocate/rollout_tokens_per_gpu_s",
    steps="all",
    constraint={"rel_up": 0.5, "abs_floor_up": 0.0, "rel_down": 0.15, "abs_floor_down": 0.0},
)
register_ci_gate(
    metric_key="bench/qwen3-4b/miles-megatron-colocate/step_time_s",
    steps="all",
    constraint={"rel_up": 0.15, "abs_floor_up": 0.0, "rel_down": 0.5, "abs_floor_down": 0.0},
)
register_ci_gate(
    metric_key="bench/qwen3-4b/miles-megatron-colocate/train_tokens_per_s",
    steps="all",
    constraint={"rel_up": 0.5, "abs_floor_up": 0.0, "rel_down": 0.15, "abs_floor_down": 0.0},
)
register_ci_gate(
    metric_key="bench/qwen3-4b/miles-megatron-colocate/rollout_tokens_per_gpu_s",
    steps="all",
    constraint={"rel_up": 0.5, "abs_floor_up": 0.0, "rel_down": 0.15, "abs_floor_down": 0.0},
)
register_ci_gate(
    metric_key="bench/qwen3-30b-a3b/miles-megatron-colocate/step_time_s",
    steps="all",
    constraint={"rel_up": 0.15, "abs_floor_up": 0.0, "rel_down": 0.5, "abs_floor_down": 0.0},
)
register_ci_gate(
    metric_key="bench/qwen3-30b-a3b/miles-megatron-colocate/train_tokens_per_s",
    steps="all",
    constraint={"rel_up": 0.5, "abs_floor_up": 0.0, "rel_down": 0.15, "abs_floor_down": 0.0},
)
register_ci_gate(
    metric_key="bench/qwen3-30b-a3b/miles-megatron-colocate/rollout_tokens_per_gpu_s",
    steps="all",
    constraint={"rel_up": 0.5, "abs_floor_up": 0.0, "rel_down": 0.15, "abs_floor_down": 0.0},
)
