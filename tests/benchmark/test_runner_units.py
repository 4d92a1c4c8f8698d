"""Runner pieces that need no process: redaction, order, watchdog, command resolution, manifest, Slurm script."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripts.benchmark.common.redaction import (
    REDACTED,
    Redactor,
    find_plan_secrets,
    find_words_secrets,
    is_secret_name,
)
from scripts.benchmark.contracts.manifest import Manifest, new_cell_run
from scripts.benchmark.contracts.plan import Known, plan_problems
from scripts.benchmark.frameworks import registry
from scripts.benchmark.runner.cell_command import FrameworkRuntime, build_cell_command, framework_interpreter_argv
from scripts.benchmark.runner.environment_record import build_environment_record, probe_packages
from scripts.benchmark.runner.executor import interleaved_order
from scripts.benchmark.runner.gpu_memory import read_used_mib, wait_until_released
from scripts.benchmark.runner.progress import MatrixProgress, format_duration
from scripts.benchmark.runner.ray_head import (
    RayTarget,
    build_head_argv,
    external_target,
    extra_start_args,
    ray_environment,
)
from scripts.benchmark.runner.slurm import build_sbatch
from scripts.benchmark.runner.watchdog import Watchdog, WatchdogLimits
from tests.benchmark.standins.plans import RUN_PY, STANDINS, standin_cell, write_plan


class TestRedaction:
    def test_secret_names_follow_the_documented_patterns(self):
        for name in (
            "WANDB_API_KEY",
            "HF_TOKEN",
            "GITHUB_TOKEN",
            "AWS_SECRET",
            "DB_PASSWORD",
            "mlflow_tracking_password",
        ):
            assert is_secret_name(name), name
        for name in ("PATH", "HOME", "TOKENIZERS_PARALLELISM", "NCCL_DEBUG", "KEYBOARD"):
            assert not is_secret_name(name), name

    def test_values_are_redacted_wherever_they_appear(self):
        redactor = Redactor.from_environ({"WANDB_API_KEY": "sekrit-123", "PATH": "/usr/bin", "X_TOKEN": "ab"})
        assert redactor.redact_text("key is sekrit-123, again sekrit-123!") == f"key is {REDACTED}, again {REDACTED}!"
        assert redactor.redact_text("/usr/bin ab") == "/usr/bin ab"  # not secrets / too short to search for
        assert redactor.redact_env({"WANDB_API_KEY": "sekrit-123", "URL": "http://u:sekrit-123@h"}) == {
            "WANDB_API_KEY": REDACTED,
            "URL": f"http://u:{REDACTED}@h",
        }

    def test_argv_secrets_are_redacted_after_flags_and_in_assignments(self):
        argv = ["train.py", "--wandb-key", "k1", "--hf-token=k2", "HF_TOKEN=k3", "+trainer.api_key=k4", "--lr", "1"]
        assert Redactor().redact_argv(argv) == [
            "train.py", "--wandb-key", REDACTED, f"--hf-token={REDACTED}", f"HF_TOKEN={REDACTED}",
            f"+trainer.api_key={REDACTED}", "--lr", "1",
        ]  # fmt: skip

    def test_secret_and_access_key_names_are_secrets_in_every_spelling(self):
        """The value is not in the environment, so only the name can tell: refused in a plan, redacted in text."""
        argv = ["train.py", "aws_secret_access_key=V1", "--aws-secret-access-key", "V2",
                "+trainer.s3.secret_access_key=V3", "--s3-accessKey=V4", "--lr", "1"]  # fmt: skip
        assert Redactor().redact_argv(argv) == [
            "train.py", f"aws_secret_access_key={REDACTED}", "--aws-secret-access-key", REDACTED,
            f"+trainer.s3.secret_access_key={REDACTED}", f"--s3-accessKey={REDACTED}", "--lr", "1",
        ]  # fmt: skip
        assert Redactor().redact_text(" ".join(argv)) == " ".join(Redactor().redact_argv(argv))
        assert find_words_secrets(argv, "argv") == [
            "argv: aws_secret_access_key",
            "argv: --aws-secret-access-key",
            "argv: +trainer.s3.secret_access_key",
            "argv: --s3-accessKey",
        ]
        assert is_secret_name("AWS_SECRET_ACCESS_KEY") and is_secret_name("minio_access_key_id")

    def test_secrets_are_recognised_by_their_name_words_and_their_shape(self):
        """Spellings the first rules missed: names holding pat, auth, credential; token-bearing flags; a password in a
        URL; known token shapes after an ordinary flag. A setting about a secret (its mode, its path) is no secret,
        nor is a tokenizer's token, a switch or a number; a flag that merely holds `secret` goes by its value."""
        ghp, aws = "ghp_" + "a1B2c3D4e5" * 4, "AKIA" + "Q" * 16
        for name in ("GITHUB_PAT", "GH_AUTH", "HF_HUB_CREDENTIAL", "githubToken", "DEPLOY_PRIVATE_KEY"):
            assert is_secret_name(name), name
        for name in ("RAY_AUTH_MODE", "HF_TOKEN_PATH", "SSH_AUTH_SOCK", "TOKENIZERS_PARALLELISM", "PATH", "AUTHOR"):
            assert not is_secret_name(name), name
        env = {"GITHUB_PAT": "pat-1", "DATABASE_URL": "postgresql://bench:hunter2-pw@db/h", "RAY_AUTH_MODE": "token"}
        redactor = Redactor.from_environ(env)
        assert redactor.redact_env(env) == {
            "GITHUB_PAT": REDACTED,
            "DATABASE_URL": f"postgresql://bench:{REDACTED}@db/h",
            "RAY_AUTH_MODE": "token",
        }
        assert redactor.redact_text("the job printed hunter2-pw and token") == f"the job printed {REDACTED} and token"
        argv = ["train.py", "--github-token", "t1", "--wandb-token", "t2", "--bearer-token", "t3", "--private-key",
                "t4", "--db-url", "postgresql://u:t5@h/db", "--lr", ghp, "--ref", aws, "--secret-name", "wandb-cred",
                "--rl-skip-bos-token", "--fim-eod-token", "<eod>", "data.balance_dp_token=True",
                "--sglang-bucket-time-to-first-token", "0.1"]  # fmt: skip
        redacted = Redactor().redact_argv(argv)
        assert redacted == [
            "train.py", "--github-token", REDACTED, "--wandb-token", REDACTED, "--bearer-token", REDACTED,
            "--private-key", REDACTED, "--db-url", f"postgresql://u:{REDACTED}@h/db", "--lr", REDACTED, "--ref",
            REDACTED, "--secret-name", "wandb-cred", "--rl-skip-bos-token", "--fim-eod-token", "<eod>",
            "data.balance_dp_token=True", "--sglang-bucket-time-to-first-token", "0.1",
        ]  # fmt: skip
        assert Redactor().redact_text(" ".join(argv)) == " ".join(redacted)
        assert find_words_secrets(argv, "argv") == [
            "argv: --github-token", "argv: --wandb-token", "argv: --bearer-token", "argv: --private-key",
            "argv[10] (a password in a URL)", "argv[12] (a GitHub token)", "argv[14] (an AWS access key id)",
        ]  # fmt: skip

    def test_every_known_token_shape_is_redacted_and_refused_wherever_it_is(self):
        shapes = {
            "a GitHub token": "ghp_" + "x7Y8" * 9,
            "a GitHub fine-grained token": "github_pat_11ABCDEFG0" + "q" * 60,
            "a Hugging Face token": "hf_" + "AbCd1234" * 4 + "zz",
            "an AWS access key id": "ASIA" + "7" * 16,
            "a Slack token": "xoxb-123456789012-abcdefABCDEF",
            "an sk- API key": "sk-proj-" + "k" * 40,
            "a JWT": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3",
        }
        for kind, token in shapes.items():
            line = f"step 3: using {token}, ok"
            assert Redactor().redact_text(line) == f"step 3: using {REDACTED}, ok", kind
            plan = {"spec": {"name": f"run-{token}"}, "cells": []}
            assert find_plan_secrets(plan) == [f"spec.name ({kind})"]
        assert Redactor().redact_text("hf_checkpoint=/root/models/x ask-for-more sk-short") == (
            "hf_checkpoint=/root/models/x ask-for-more sk-short"
        )

    def test_a_plan_with_a_literal_secret_is_reported_by_location(self):
        cell = standin_cell("miles")
        cell["env"]["HF_TOKEN"] = "hf_x"
        cell["launch_argv"] += ["--wandb-key", "abc"]
        assert find_plan_secrets({"cells": [cell]}) == [
            "cells[miles-fsdp-colocate].env.HF_TOKEN",
            "cells[miles-fsdp-colocate].launch_argv: --wandb-key",
        ]

    def test_the_real_launches_of_every_preset_carry_no_secret_and_keep_their_data_keys(self, tmp_path):
        """--input-key, --label-key, --reward-key (Miles) and data.prompt_key (VERL) are data keys, not secrets."""
        from scripts.benchmark.plan.build import PlanOptions, build_plan
        from scripts.benchmark.spec import BACKENDS, load_preset, preset_names

        for preset in preset_names():
            sides = registry.option_pair(compare_verl=True, miles_version=None)
            options = PlanOptions(backends=BACKENDS, layout="colocate", output_dir=tmp_path, sides=sides)
            plan = build_plan(load_preset(preset), preset, options).data
            assert find_plan_secrets(plan) == [] and plan_problems(plan) == []
            for cell in plan["cells"]:
                assert Redactor(values=("hf_secret_value",)).redact_argv(cell["launch_argv"]) == cell["launch_argv"]
        miles = next(c for c in plan["cells"] if c["framework"] == "miles")["argv"]
        assert miles[miles.index("--input-key") + 1] == "prompt" and "--reward-key" in miles


class TestPlanChecks:
    def test_bad_cells_are_reported_with_the_field_and_the_value(self):
        cell = standin_cell("verl")
        cell["num_steps"] = 0
        cell["sink"]["format"] = "tensorboard"
        twin = standin_cell("verl")
        known = Known(frameworks=registry.names(), sink_formats=registry.sink_formats())
        problems = plan_problems({"schema_version": 1, "cells": [cell, twin, {"id": "x"}]}, known)
        assert "cells[0] (verl-fsdp-colocate): num_steps must be a positive integer, got 0" in problems
        assert any("sink.format 'tensorboard' is not one of" in p for p in problems)
        assert "cells[1] (verl-fsdp-colocate): duplicate id" in problems
        assert any(p.startswith("cells[2] lacks framework, backend") for p in problems)
        assert plan_problems({"schema_version": 2, "cells": []}) == [
            "schema_version is 2, expected 1",
            "cells must be a non-empty list",
        ]

    def test_repeats_are_interleaved_per_backend_with_the_side_order_balanced(self):
        """Miles first in even repeats, VERL first in odd ones: neither side always takes the first slot."""
        cells = [
            standin_cell("verl", backend="fsdp"),
            standin_cell("miles", backend="megatron"),
            standin_cell("miles", backend="fsdp"),
            standin_cell("verl", backend="megatron"),
        ]
        order = [(c["id"], rep) for c, rep in interleaved_order(cells, repeats=3)]
        even = ["miles-fsdp-colocate", "verl-fsdp-colocate", "miles-megatron-colocate", "verl-megatron-colocate"]
        odd = ["verl-fsdp-colocate", "miles-fsdp-colocate", "verl-megatron-colocate", "miles-megatron-colocate"]
        assert order == [(i, 0) for i in even] + [(i, 1) for i in odd] + [(i, 2) for i in even]


class TestWatchdog:
    limits = WatchdogLimits(cell_timeout_s=100, first_step_timeout_s=30, stall_timeout_s=10)

    def test_startup_stall_then_progress_then_stall(self):
        dog = Watchdog(limits=self.limits, started_at=0.0, num_steps=5)
        assert dog.check(29.0, None) is None
        assert dog.check(31.0, None).reason.startswith("stalled: no step within 31 s of start")
        dog.on_step(20.0, 1)
        assert dog.check(29.0, None) is None
        verdict = dog.check(31.0, None)
        assert verdict.state == "failed" and "no new step for 11 s after step 1" in verdict.reason

    def test_time_limit_and_exit_codes(self):
        dog = Watchdog(limits=self.limits, started_at=0.0, num_steps=3)
        dog.on_step(95.0, 3)
        assert "time limit: ran 101 s" in dog.check(101.0, None).reason
        assert dog.check(50.0, 0).state == "complete"
        assert dog.check(50.0, 2).reason == "exited with code 2 after 3 of 3 steps"
        assert dog.check(50.0, -9).reason == "killed by signal 9 after 3 of 3 steps"
        short = Watchdog(limits=self.limits, started_at=0.0, num_steps=3)
        short.on_step(1.0, 1)
        assert short.check(2.0, 0).reason == "exited with code 0 after only 1 of 3 steps"
        far = Watchdog(limits=self.limits, started_at=0.0, num_steps=3)
        far.on_step(1.0, 4)  # one more is Miles's way of logging its last rollout: still complete
        assert far.check(2.0, 0).state == "complete"
        far.on_step(1.5, 40)
        assert far.check(2.0, 0).reason == (
            "exited with code 0 after 40 steps, more than the plan's 3: the trainer did not run the planned workload"
        )

    def test_zero_disables_a_limit(self):
        dog = Watchdog(
            limits=WatchdogLimits(cell_timeout_s=0, first_step_timeout_s=0, stall_timeout_s=0),
            started_at=0,
            num_steps=1,
        )
        assert dog.check(1e9, None) is None


class TestCellCommand:
    def test_miles_ray_job_submit_is_pointed_at_the_private_head_with_a_submission_id(self, tmp_path: Path):
        cell = standin_cell("miles")
        cell["launch_argv"] = [
            "ray", "job", "submit", "--address", "http://127.0.0.1:8265", "--runtime-env-json={}", "--",
            "python3", "train.py", "--save", "${BENCH_CELL_DIR}/ckpt",
        ]  # fmt: skip
        cell["env"] = {"OUT": "${BENCH_CELL_DIR}/x"}
        target = RayTarget(gcs_address="127.0.0.1:40001", dashboard_url="http://127.0.0.1:40002", private=True)
        command = build_cell_command(
            cell, cell_dir=tmp_path, runtime=FrameworkRuntime(python="/envs/miles/bin/python"), ray=target,
            submission_id="bench-x", base_env={"HOME": "/root"},
        )  # fmt: skip
        assert command.argv == [
            "ray", "job", "submit", "--address=http://127.0.0.1:40002", "--submission-id=bench-x",
            "--runtime-env-json={}", "--", "/envs/miles/bin/python", "train.py", "--save", f"{tmp_path}/ckpt",
        ]  # fmt: skip
        assert command.submission_id == "bench-x"
        assert command.plan_env["RAY_ADDRESS"] == "http://127.0.0.1:40002"
        assert command.process_env["OUT"] == f"{tmp_path}/x" and command.process_env["HOME"] == "/root"

    def test_verl_gets_the_gcs_address_and_a_prefix_carries_the_env_explicitly(self, tmp_path: Path):
        cell = standin_cell("verl")
        cell["launch_argv"] = ["python3", "-m", "verl.trainer.main_ppo", "trainer.total_epochs=1"]
        runtime = FrameworkRuntime.from_options(None, "docker exec -i verl-box")
        target = external_target("10.0.0.1:6379", None)
        command = build_cell_command(
            cell, cell_dir=tmp_path, runtime=runtime, ray=target, submission_id="unused", base_env={"HOME": "/h"}
        )
        assert command.argv[:5] == ["docker", "exec", "-i", "verl-box", "env"]
        assert "RAY_ADDRESS=10.0.0.1:6379" in command.argv and f"BENCH_CELL_DIR={tmp_path}" in command.argv
        assert command.argv[-4:] == cell["launch_argv"]
        assert "RAY_ADDRESS" not in command.process_env  # only the container side gets the plan env
        assert framework_interpreter_argv(cell["launch_argv"], runtime) == [
            "docker",
            "exec",
            "-i",
            "verl-box",
            "python3",
        ]

    def test_external_addresses_are_split_into_gcs_and_dashboard(self):
        assert external_target("http://head:8265", None) == RayTarget("head:6379", "http://head:8265", False)
        assert external_target("head:7000", "http://head:9000").dashboard_url == "http://head:9000"

    def test_the_private_head_blocks_in_the_foreground_on_its_own_ports(self, tmp_path: Path):
        argv = build_head_argv(["ray"], ports=[1, 2, 3, 4, 5, 6], temp_dir=tmp_path, num_gpus=8)
        assert argv[:4] == ["ray", "start", "--head", "--block"]
        assert {"--port=1", "--dashboard-port=2", f"--temp-dir={tmp_path}", "--num-gpus=8"} <= set(argv)

    def test_extra_ray_start_options_come_from_the_environment_with_shell_quoting(self):
        env = {"BENCH_RAY_START_ARGS": """--num-cpus=1 --resources='{"node_a": 1}'"""}
        assert extra_start_args(env) == ["--num-cpus=1", '--resources={"node_a": 1}']
        assert extra_start_args({}) == []
        with pytest.raises(ValueError, match="BENCH_RAY_START_ARGS is not a valid shell word list"):
            extra_start_args({"BENCH_RAY_START_ARGS": "--resources='{"})

    def test_a_start_option_list_that_does_not_parse_is_bad_input_before_anything_starts(self, tmp_path: Path):
        plan = write_plan(tmp_path / "plan", [standin_cell("verl")])
        argv = [sys.executable, str(RUN_PY), "execute", str(plan), "--output-dir", str(tmp_path / "run")]
        env = {**os.environ, "BENCH_RAY_START_ARGS": "--num-cpus='1"}
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
        assert result.returncode == 2 and "BENCH_RAY_START_ARGS is not a valid shell word list" in result.stderr
        assert "Traceback" not in result.stderr and not (tmp_path / "run").exists()


class TestManifest:
    def test_transitions_are_enforced_and_saved_atomically(self, tmp_path: Path):
        cell = new_cell_run(standin_cell("verl"), 1)
        manifest = Manifest(path=tmp_path / "manifest.json", cells=[cell])
        with pytest.raises(ValueError, match="illegal transition pending -> complete"):
            manifest.set_state(cell, "complete")
        manifest.set_state(cell, "running")
        manifest.set_state(cell, "failed", reason="exited with code 1")
        loaded = Manifest.load(tmp_path / "manifest.json")
        assert loaded.cells[0].state == "failed" and loaded.cells[0].reason == "exited with code 1"
        assert loaded.cells[0].metrics == "cells/verl-fsdp-colocate/rep-1/metrics.jsonl"
        assert loaded.cells[0].started_at.endswith("Z") and loaded.cells[0].ended_at.endswith("Z")
        assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


RAY_STATUS_TWO_NODES = """======== Autoscaler status: 2026-12-04 03:00:00.000000 ========
Node status
---------------------------------------------------------------
Active:
 1 node_2c4f5e0f1d2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f80
 1 node_9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d
Pending:
 (no pending nodes)
Recent failures:
 (no failures)

Resources
---------------------------------------------------------------
Usage:
 0.0/2.0 CPU
 0.0/1.0 node_a
 0.0/1.0 node_b
 0B/190.73MiB memory
 0B/190.73MiB object_store_memory

Demands:
 (no resource demands)
"""
"""What `ray status` (Ray 2.x) prints for two nodes that carry custom resources node_a and node_b."""


class TestSlurmAndProgress:
    def test_the_sbatch_script_sizes_the_allocation_from_the_plan_and_parses(self, tmp_path: Path, monkeypatch):
        monkeypatch.setenv("WANDB_API_KEY", "sekrit-123")
        cell = standin_cell("miles")
        cell["gpus"] = {"train": 16, "rollout": 16, "total": 16, "per_node": 8, "nodes": 2}
        text = build_sbatch(
            {"cells": [cell, standin_cell("verl")]},
            ["execute", "plan.json", "--output-dir", "out", "--ray", "none", "--miles-prefix", "env X=sekrit-123"],
            python="/usr/bin/python3",
            workdir=tmp_path,
        )
        assert "#SBATCH --nodes=2" in text and "#SBATCH --gpus-per-node=8" in text
        assert "--ray none" not in text and "--ray external --ray-address" in text
        assert "sekrit-123" not in text
        assert "pkill" not in text and "killall" not in text and "ray stop" not in text
        assert text.count('"${start_args[@]}"') == 1  # one start_node for the head and every worker
        assert "--gres" not in text and text.count("--gpus-per-node=8") == 1  # GPUs requested one way, for the job
        assert "0.0.0.0" not in text and '--dashboard-host="$head_ip"' in text
        script = tmp_path / "job.sbatch"
        script.write_text(text)
        assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0

    def test_the_sbatch_script_counts_ray_nodes_not_node_resources(self, tmp_path: Path):
        """Two nodes that also carry custom resources named node_a and node_b: the script's count is 2, not 4."""
        text = build_sbatch(
            {"cells": [standin_cell("miles")]}, ["execute", "p.json"], python="python3", workdir=tmp_path
        )
        function = text[text.index("alive_nodes() {") : text.index("\n}\n", text.index("alive_nodes() {")) + 3]
        status = tmp_path / "ray"
        status.write_text(f"#!/bin/sh\ncat <<'EOF'\n{RAY_STATUS_TWO_NODES}EOF\n")
        status.chmod(0o755)
        script = f"RAY={status}\nhead_ip=127.0.0.1\nRAY_PORT=6379\n{function}alive_nodes\n"
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
        assert done.stdout.strip() == "2", done.stdout + done.stderr

    def test_a_failed_ray_job_stop_says_what_ray_answered(self):
        """`ray job stop` that fails (a stand-in CLI printing Ray's error): its answer is kept, not thrown away."""
        from scripts.benchmark.runner.ray_head import stop_ray_job

        cli = [sys.executable, "-c", "import sys; print('ConnectionError: Failed to connect to Ray'); sys.exit(1)"]
        problem = stop_ray_job(cli, "http://127.0.0.1:9", "bench-x", timeout_s=30, env=os.environ)
        assert (
            problem == "ray job stop bench-x at http://127.0.0.1:9: exit 1: ConnectionError: Failed to connect to Ray"
        )
        assert (
            stop_ray_job([sys.executable, "-c", "pass"], "http://h:1", "bench-y", timeout_s=30, env=os.environ) is None
        )

    def test_plain_progress_lines_when_not_a_terminal(self):
        stream = io.StringIO()
        progress = MatrixProgress(total_cells=2, stream=stream)
        progress.cell_started("miles-fsdp-colocate rep 0", 3)
        progress.step(1, 2.5)
        progress.cell_ended("failed", "stalled")
        assert stream.getvalue().splitlines() == [
            "[1/2] start miles-fsdp-colocate rep 0 (3 steps)",
            "[1/2] miles-fsdp-colocate rep 0: step 1/3 last step 2.50 s, ETA ?",
            "[1/2] failed miles-fsdp-colocate rep 0: stalled",
        ]
        assert (format_duration(59), format_duration(61), format_duration(3700)) == ("59s", "1m01s", "1h01m")


def test_manifest_json_is_strict_json(tmp_path: Path):
    manifest = Manifest(path=tmp_path / "manifest.json", cells=[new_cell_run(standin_cell("miles"), 0)])
    manifest.save()
    data = json.loads((tmp_path / "manifest.json").read_text())
    assert data["schema_version"] == 1 and data["plan"] == "plan.json" and data["cells"][0]["state"] == "pending"


class TestGpuProbes:
    """Against a stand-in nvidia-smi on PATH (tests/benchmark/standins/nvidia-smi), answering the runner's queries."""

    @pytest.fixture
    def smi(self, monkeypatch):
        monkeypatch.setenv("PATH", f"{STANDINS}:{os.environ['PATH']}")
        return monkeypatch

    def test_the_environment_record_reads_gpu_model_count_driver_and_cuda(self, smi):
        record = build_environment_record(framework="verl", interpreter_argv=["python3"], packages={"packages": {}})
        assert (record["gpu_model"], record["gpu_count"], record["driver"]) == ("NVIDIA H200", 2, "570.124.06")
        assert record["cuda_driver"] == "12.8" and "gpus" not in record["missing"]

    def test_gpu_memory_release_is_awaited_and_a_leak_is_reported(self, smi):
        smi.setenv("STANDIN_SMI_USED_MIB", "5")
        baseline = read_used_mib()
        assert baseline == {0: 5.0, 1: 3.0}
        assert wait_until_released(baseline, timeout_s=0.2, poll_s=0.05) is None
        smi.setenv("STANDIN_SMI_USED_MIB", "70000")
        message = wait_until_released(baseline, timeout_s=0.2, poll_s=0.05)
        assert message == "GPU memory not released 0 s after the cell stopped: GPU 0: 70000 MiB (before the run: 5)"

    def test_without_nvidia_smi_the_record_says_why(self, monkeypatch, tmp_path):
        monkeypatch.setenv("PATH", str(tmp_path))
        record = build_environment_record(framework="miles", interpreter_argv=["python3"], packages={"packages": {}})
        assert record["gpu_count"] is None and record["missing"]["gpus"] == "nvidia-smi not found on PATH"
        assert read_used_mib() is None and wait_until_released(None, timeout_s=1) is None

    def test_the_package_probe_reads_versions_from_the_interpreter_without_importing_them(self):
        probe = probe_packages([sys.executable])
        assert probe["python"] == sys.version.split()[0]
        assert probe["packages"]["torch"]["version"]  # installed in the test venv; read via importlib.metadata
        assert probe["packages"]["sglang"] == {
            "version": None,
            "commit": None,
            "missing": "not installed in this interpreter",
        }
        assert probe["torch_git_version"] and len(probe["torch_git_version"]) == 40
        assert probe_packages(["/no/such/python"])["missing"].startswith("could not run the interpreter probe")

    def test_the_cuda_build_of_torch_is_read_from_its_version_file(self, tmp_path: Path):
        """torch/version.py as a CUDA 13 build writes it (the lines seen on an H200 node), found via PYTHONPATH."""
        (tmp_path / "torch").mkdir()
        (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('the probe must not import torch')\n")
        (tmp_path / "torch" / "version.py").write_text(
            "cuda: Optional[str] = '13.0'\ngit_version = '70d99e998b4955e0049d13a98d77ae1b14db1f45'\n"
            "hip: Optional[str] = None\n"
        )
        probe = probe_packages([sys.executable], env={**os.environ, "PYTHONPATH": str(tmp_path)})
        assert probe["torch_cuda"] == "13.0" and probe["torch_hip"] is None
        assert probe["torch_git_version"] == "70d99e998b4955e0049d13a98d77ae1b14db1f45"


def test_live_progress_renders_with_rich():
    stream = io.StringIO()
    progress = MatrixProgress(total_cells=1, live=True, stream=stream)
    progress.cell_started("verl-fsdp-colocate rep 0", 2)
    progress.step(1, 0.5)
    progress.cell_ended("complete", None)
    progress.close()
    assert "complete verl-fsdp-colocate rep 0" in stream.getvalue()


def test_emit_sbatch_writes_the_script_and_runs_nothing(tmp_path: Path):
    plan = write_plan(tmp_path / "plan", [standin_cell("verl")])
    script = tmp_path / "bench.sbatch"
    argv = [sys.executable, str(RUN_PY), "execute", str(plan), "--output-dir", str(tmp_path / "run")]
    result = subprocess.run([*argv, "--emit-sbatch", str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    text = script.read_text()
    assert f"execute {plan} --output-dir {tmp_path / 'run'} --ray external" in text
    assert str(script) not in text
    assert not (tmp_path / "run").exists()


def test_a_signal_while_the_end_of_run_report_is_written_stops_it_and_is_recorded(tmp_path: Path):
    """In-process, as the harness runs it: the report is cut short, the manifest says so, no exception escapes."""
    import threading

    from scripts.benchmark.commands.execute import end_of_run_report
    from scripts.benchmark.runner.end_report import report_after_run
    from tests.benchmark.synthetic_runs import write_run_folder
    from tests.benchmark.test_report import planted_cells

    run_dir = write_run_folder(tmp_path, planted_cells())
    manifest = Manifest.load(run_dir / "manifest.json")
    late: list[int] = []

    def harness_handler(signum, _frame):
        late.append(signum)

    previous = signal.signal(signal.SIGINT, harness_handler)
    timer = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT))

    def slow_report(folder):  # the real report, started late enough that the signal always comes while it runs
        time.sleep(5)
        return end_of_run_report(folder)

    try:
        timer.start()
        report_after_run(manifest, MatrixProgress(total_cells=0, stream=io.StringIO(), live=False), slow_report)
        restored = signal.getsignal(signal.SIGINT)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert late == [], "the signal arrived after the report finished: make the run folder larger"
    assert manifest.warnings == [f"report: not written, interrupted by SIGINT; run `run.py report {run_dir}`"]
    assert Manifest.load(run_dir / "manifest.json").warnings == manifest.warnings
    assert restored is harness_handler and not (run_dir / "report.md").exists()


def test_resume_reads_per_framework_options_of_manifests_written_before_pythons_and_prefixes():
    from scripts.benchmark.runner.options import ExecuteOptions, options_from_manifest

    stored = {"repeats": 2, "miles_python": "/opt/m/bin/python", "verl_prefix": "<redacted>", "miles_prefix": None}
    options = options_from_manifest(stored)
    assert options == {"repeats": 2, "pythons": {"miles": "/opt/m/bin/python"}}
    miles_base, verl = {"side": "miles-base", "framework": "miles"}, {"side": "verl", "framework": "verl"}
    assert ExecuteOptions(**options).runtime(miles_base).python == "/opt/m/bin/python"  # by framework, every side
    assert ExecuteOptions(**options).runtime(verl) == ExecuteOptions().runtime(verl)
    current = {"pythons": {"verl": "/v"}, "prefixes": {"miles": "docker exec -i m", "verl": "<redacted>"}}
    assert options_from_manifest(current) == {"pythons": {"verl": "/v"}, "prefixes": {"miles": "docker exec -i m"}}


class TestRayAuthMode:
    """Ray 2.60 turns token authentication on for a head it starts when a token exists and RAY_AUTH_MODE is unset,
    while its clients read the token only in token mode: every Ray command of the harness gets the same mode."""

    def test_a_token_file_in_home_makes_token_mode_explicit(self, tmp_path):
        (tmp_path / ".ray").mkdir()
        (tmp_path / ".ray" / "auth_token").write_text("0123456789abcdef")
        assert ray_environment({"HOME": str(tmp_path)})["RAY_AUTH_MODE"] == "token"

    def test_a_token_in_the_environment_or_at_its_path_makes_token_mode_explicit(self, tmp_path):
        assert ray_environment({"HOME": str(tmp_path), "RAY_AUTH_TOKEN": "t"})["RAY_AUTH_MODE"] == "token"
        (tmp_path / "token").write_text("t")
        env = {"HOME": str(tmp_path), "RAY_AUTH_TOKEN_PATH": str(tmp_path / "token")}
        assert ray_environment(env)["RAY_AUTH_MODE"] == "token"

    def test_no_token_or_a_chosen_mode_is_left_as_it_is(self, tmp_path):
        assert "RAY_AUTH_MODE" not in ray_environment({"HOME": str(tmp_path)})
        (tmp_path / ".ray").mkdir()
        (tmp_path / ".ray" / "auth_token").write_text("")  # an empty file is no token
        assert "RAY_AUTH_MODE" not in ray_environment({"HOME": str(tmp_path)})
        (tmp_path / ".ray" / "auth_token").write_text("t")
        chosen = {"HOME": str(tmp_path), "RAY_AUTH_MODE": "disabled"}
        assert ray_environment(chosen) == chosen

    def test_the_sbatch_script_decides_the_mode_before_the_head_starts(self, tmp_path):
        script = build_sbatch(
            {"cells": [standin_cell("miles")]}, ["execute", "plan.json"], python="/usr/bin/python3", workdir=tmp_path
        )
        mode_at, head_at = script.index("export RAY_AUTH_MODE=token"), script.index('start_node "$head_node" --head')
        assert mode_at < head_at and '-s "${RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}"' in script
