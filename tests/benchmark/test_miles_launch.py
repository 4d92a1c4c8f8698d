"""The Miles launch: only flags that exist for the backend, every backend-divergent default pinned, nothing that
adds untimed or unmatched work (eval, checkpoints, dump-details, fault tolerance, wandb, ref model)."""

import json

import pytest

from scripts.benchmark.frameworks.miles.flags import (
    check_miles_argv,
    check_with_miles_parser,
    flag_default,
    flag_problems,
    load_inventory,
    split_flags,
)
from scripts.benchmark.frameworks.miles.launch import (
    EXTRA_WORK_SWITCHES,
    MilesPaths,
    build_miles_launch,
    megatron_architecture_args,
)
from scripts.benchmark.spec import BACKENDS, LAYOUTS, BenchmarkSpec, load_preset, preset_names, with_overrides

CELLS = [(p, b, lay) for p in preset_names() for b in BACKENDS for lay in LAYOUTS]


def _launch(preset="qwen3-1.7b-base", backend="fsdp", layout="colocate", wandb=None):
    return build_miles_launch(with_overrides(load_preset(preset), layout=layout, wandb=wandb), backend, layout)


def _flags(argv) -> dict[str, list[str]]:
    return {flag: values for flag, values in split_flags(argv)}


class TestInventory:
    @pytest.mark.parametrize("preset,backend,layout", CELLS)
    def test_every_emitted_flag_exists_for_its_backend(self, preset, backend, layout):
        assert flag_problems(_launch(preset, backend, layout).argv, backend) == []

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_wandb_flags_exist_for_both_backends_and_carry_no_key(self, backend):
        argv = _launch(backend=backend, layout="disaggregated", wandb=True).argv
        assert flag_problems(argv, backend) == []
        flags = _flags(argv)
        assert flags["--wandb-group"] == [f"miles-{backend}-disaggregated"] and "--use-wandb" in flags
        assert "--disable-wandb-random-suffix" in flags and "--wandb-key" not in flags

    def test_a_megatron_only_flag_planted_in_fsdp_is_caught(self):
        """--save-retain-interval is the flag that breaks Miles's own run_mcore_fsdp.py in FSDP mode."""
        argv = _launch().argv + ["--save-retain-interval", "20"]
        with pytest.raises(ValueError, match="--save-retain-interval is not a train.py flag for --train-backend fsdp"):
            check_miles_argv(argv, "fsdp")

    def test_an_fsdp_only_flag_planted_in_megatron_is_caught(self):
        problems = flag_problems(_launch(backend="megatron").argv + ["--gradient-checkpointing"], "megatron")
        assert problems == [
            "--gradient-checkpointing is not a train.py flag for --train-backend megatron "
            "(it exists only for --train-backend fsdp)"
        ]

    def test_a_value_outside_the_choices_is_caught(self):
        problems = flag_problems(_launch().argv + ["--advantage-estimator", "grpoo"], "fsdp")
        assert problems and "--advantage-estimator grpoo: not one of" in problems[0]

    def test_inventory_path_comes_from_env(self, tmp_path, monkeypatch):
        inventory = json.loads(json.dumps(load_inventory()))
        del inventory["common"]["--balance-data"]
        path = tmp_path / "inv.json"
        path.write_text(json.dumps(inventory))
        monkeypatch.setenv("MILES_CLI_INVENTORY", str(path))
        assert flag_problems(_launch().argv, "fsdp") == [
            "--balance-data is not a train.py flag for --train-backend fsdp"
        ]

    def test_miles_parser_branch_reports_unavailable_here(self):
        """Miles is not importable in this checkout: the parser check says so (None) instead of passing."""
        assert check_with_miles_parser(_launch().argv, "fsdp") is None

    def test_backend_defaults_differ_where_miles_md_says(self):
        """Without pinning, the two Miles backends would train differently."""
        inv = load_inventory()
        assert flag_default(inv, "megatron", "--adam-beta2") == 0.999
        assert flag_default(inv, "fsdp", "--adam-beta2") == 0.95
        assert flag_default(inv, "megatron", "--lr-decay-style") == "linear"
        assert flag_default(inv, "megatron", "--hidden-dropout") == 0.1


class TestPinnedValues:
    @pytest.mark.parametrize("backend", BACKENDS)
    def test_backend_divergent_defaults_are_pinned(self, backend):
        flags = _flags(_launch(backend=backend).argv)
        assert flags["--adam-beta2"] == ["0.98"] and flags["--weight-decay"] == ["0.1"]
        assert flags["--lr-decay-style"] == ["constant"] and flags["--lr"] == ["1e-06"]
        assert flags["--global-batch-size"] == ["1024"] and flags["--adam-eps"] == ["1e-08"]

    def test_megatron_dropout_is_zero(self):
        flags = _flags(_launch(backend="megatron").argv)
        assert flags["--attention-dropout"] == ["0.0"] and flags["--hidden-dropout"] == ["0.0"]

    @pytest.mark.parametrize("preset,backend,layout", CELLS)
    def test_nothing_that_adds_unmatched_work(self, preset, backend, layout):
        flags = _flags(_launch(preset, backend, layout).argv)
        forbidden = {"--eval-interval", "--eval-prompt-data", "--save", "--load", "--ref-load", "--save-interval"}
        forbidden |= {"--dump-details", "--use-wandb", "--use-fault-tolerance", "--use-kl-loss", "--rollout-shuffle"}
        forbidden |= {"--save-debug-rollout-data", "--ci-test", "--use-miles-dashboard"}
        assert forbidden.isdisjoint(flags)

    def test_fixed_prompt_slice_and_dapo_scorer(self):
        flags = _flags(_launch().argv)
        assert flags["--prompt-data"] == ["/root/datasets/dapo-math-17k/dapo-math-17k.jsonl@[0:3072]"]
        assert flags["--rm-type"] == ["dapo"] and flags["--reward-key"] == ["score"]

    def test_sink_is_the_tracking_folder_in_the_cell_folder(self):
        launch = _launch()
        assert launch.sink == {"format": "miles-tracking", "path": "${BENCH_CELL_DIR}/sink/miles-tracking"}

    @pytest.mark.parametrize("preset,backend,layout", CELLS)
    def test_no_switch_whose_code_path_adds_work_per_step(self, preset, backend, layout):
        """Neither a debug/event flag nor the FT-trainer env (the engine weight checksum after every update)."""
        launch = _launch(preset, backend, layout)
        env = json.loads(launch.launch_argv[launch.launch_argv.index("--runtime-env-json") + 1])["env_vars"]
        switched = (set(_flags(launch.argv)) | set(env) | set(launch.env)) & set(EXTRA_WORK_SWITCHES)
        assert switched == set()

    def test_the_extra_work_table_names_real_miles_switches(self):
        inventory = load_inventory()
        flags = [f for f in EXTRA_WORK_SWITCHES if f.startswith("--")]
        assert all(flag_problems([f], "megatron", inventory) == [] for f in flags)

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_disaggregated_runs_train_async_and_colocated_train(self, backend):
        split, colocated = _launch(backend=backend, layout="disaggregated"), _launch(backend=backend)
        assert split.argv[1].endswith("/train_async.py") and colocated.argv[1].endswith("/train.py")
        assert _flags(split.argv)["--update-weights-interval"] == ["1"] and "--colocate" not in _flags(split.argv)
        assert flag_problems(split.argv, backend) == [] and "--fully-async" not in _flags(split.argv)

    @pytest.mark.parametrize(
        "version,flag", [("0.5.13", "--sglang-cuda-graph-max-bs"), ("0.5.16", "--sglang-cuda-graph-max-bs-decode")]
    )
    def test_cuda_graph_cap_is_spelled_for_the_sglang_miles_runs(self, version, flag):
        data = load_preset("qwen3-30b-a3b").model_dump()
        data["rollout"]["sglang_versions"]["miles"] = version
        spec = BenchmarkSpec.model_validate(data)
        flags = _flags(build_miles_launch(spec, "megatron", "colocate").argv)
        assert flag in flags and flag_problems(build_miles_launch(spec, "megatron", "colocate").argv, "megatron") == []

    def test_fsdp_launch_carries_the_backend_marker_execute_train_asserts(self):
        """command_utils.execute_train asserts the substring `--train-backend fsdp` for FSDP launches."""
        assert "--train-backend fsdp" in " ".join(_launch().argv)
        assert "--train-backend fsdp" not in " ".join(_launch(backend="megatron").argv)

    def test_placement_per_layout(self):
        colocated = _flags(_launch(layout="colocate").argv)
        split = _flags(_launch(layout="disaggregated").argv)
        assert "--colocate" in colocated and "--rollout-num-gpus" not in colocated
        assert "--colocate" not in split
        assert split["--rollout-num-gpus"] == ["4"] and split["--actor-num-gpus-per-node"] == ["4"]

    def test_smoke_names_its_one_gpu_node(self):
        """Miles's rollout side assumes 8 GPUs per node unless told."""
        assert _flags(_launch("smoke").argv)["--num-gpus-per-node"] == ["1"]
        split = _launch("smoke", layout="disaggregated")
        assert _flags(split.argv)["--num-gpus-per-node"] == ["2"] and split.ray_head_argv[-3:-1] == ["--num-gpus", "2"]


class TestRayWrapping:
    def test_launch_is_ray_job_submit_of_argv_without_pkill(self):
        launch = build_miles_launch(load_preset("smoke"), "megatron", "colocate", MilesPaths("/opt/miles", "/opt/mlm"))
        sep = launch.launch_argv.index("--")
        assert launch.launch_argv[:3] == ["ray", "job", "submit"] and launch.launch_argv[sep + 1 :] == launch.argv
        assert launch.argv[:2] == ["python3", "/opt/miles/train.py"]
        env = json.loads(launch.launch_argv[launch.launch_argv.index("--runtime-env-json") + 1])["env_vars"]
        assert env["PYTHONPATH"] == "/opt/miles:/opt/mlm" and env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
        assert not any("pkill" in token for token in launch.launch_argv + launch.ray_head_argv)
        assert launch.ray_head_argv[:4] == ["ray", "start", "--head", "--block"]


class TestArchitectureArgs:
    def test_dense_args_match_miles_qwen3_1_7b_model_file(self):
        """Values of Miles's scripts/models/qwen3-1.7B.py, here derived from the HF config."""
        flags = _flags(["train.py"] + megatron_architecture_args(load_preset("qwen3-1.7b-base").model.hf_config()))
        expected = {
            "--num-layers": ["28"],
            "--hidden-size": ["2048"],
            "--ffn-hidden-size": ["6144"],
            "--num-attention-heads": ["16"],
            "--num-query-groups": ["8"],
            "--kv-channels": ["128"],
            "--norm-epsilon": ["1e-06"],
            "--rotary-base": ["1000000"],
            "--vocab-size": ["151936"],
            "--normalization": ["RMSNorm"],
        }
        assert {k: flags[k] for k in expected} == expected
        assert {"--swiglu", "--group-query-attention", "--qk-layernorm", "--disable-bias-linear"} <= set(flags)
        assert "--untie-embeddings-and-output-weights" not in flags

    def test_moe_args_match_miles_qwen3_30b_a3b_model_file(self):
        flags = _flags(["train.py"] + megatron_architecture_args(load_preset("qwen3-30b-a3b").model.hf_config()))
        assert flags["--num-experts"] == ["128"] and flags["--moe-router-topk"] == ["8"]
        assert flags["--moe-ffn-hidden-size"] == ["768"] and flags["--num-query-groups"] == ["4"]
        assert flags["--moe-layer-freq"] == ["[" + ",".join(["1"] * 48) + "]"]
        assert "--untie-embeddings-and-output-weights" in flags and "--moe-grouped-gemm" in flags


class TestSinkPerTarget:
    """The in-tree Miles (31f1ca9 with the patch series) writes the tracking backend's files; miles-rl 0.0.2 has no
    backend and keeps the job's stdout. The plan cell's `sink` says which; the backend's switch reaches the job."""

    def test_the_in_tree_target_uses_the_tracking_backend(self):
        from scripts.benchmark.frameworks.miles.launch import TRACKING_DIR

        launch = build_miles_launch(load_preset("smoke"), "megatron", "colocate")
        assert launch.sink == {"format": "miles-tracking", "path": TRACKING_DIR}
        assert launch.env["BENCH_TRACKING_DIR"] == TRACKING_DIR == "${BENCH_CELL_DIR}/sink/miles-tracking"
        runtime = json.loads(launch.launch_argv[launch.launch_argv.index("--runtime-env-json") + 1])
        assert runtime["env_vars"]["BENCH_TRACKING_DIR"] == TRACKING_DIR

    def test_the_release_keeps_the_stdout_sink(self):
        from scripts.benchmark.frameworks.miles.launch import SINK_LOG
        from scripts.benchmark.frameworks.miles.versions import MILES_RELEASE, miles_target

        launch = build_miles_launch(load_preset("smoke"), "megatron", "colocate", target=miles_target(MILES_RELEASE))
        assert launch.sink == {"format": "miles-stdout", "path": SINK_LOG}
        assert "BENCH_TRACKING_DIR" not in launch.env
        assert "BENCH_TRACKING_DIR" not in " ".join(launch.launch_argv)

    def test_a_tracking_sink_that_never_appears_fails_the_cell_by_name(self, tmp_path):
        """A Miles checkout without the patch series runs, prints to stdout, and writes no tracking file: the end
        of the cell says so instead of counting zero steps."""
        from scripts.benchmark.runner.sink_follower import read_sink

        folder = tmp_path / "sink" / "miles-tracking"
        context = {"cell": {"gpus": {"train": 8, "rollout": 8}}}
        assert read_sink("miles-tracking", folder, context) == []  # while the cell runs: no steps yet
        with pytest.raises(ValueError, match=r"miles-tracking sink .*miles-tracking holds no files"):
            read_sink("miles-tracking", folder, {**context, "final": True})
        folder.mkdir(parents=True)
        with pytest.raises(ValueError, match="log.txt"):
            read_sink("miles-tracking", folder, {**context, "final": True})
