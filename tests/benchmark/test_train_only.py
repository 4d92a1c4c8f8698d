"""Train-only plans: one recorded rollout replayed into every cell's training step.

The spec's mode and its recording cache, the plan's recording pass and conversions (prepare steps), the replay
switches of every cell, the recording key that makes the recording reusable, the parity row naming what each side
still does besides training, and the command line. Both frameworks' own checks of these launches are in
test_verl_own_checks.py (VERL's validation, trainer and RolloutTqSkip) and test_miles_overlay.py (Miles's parser).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import ValidationError
from scripts.benchmark.analysis.train_only import NOT_COMPARED, TRAINING_METRICS
from scripts.benchmark.errors import UserError
from scripts.benchmark.frameworks import registry
from scripts.benchmark.plan.build import PlanOptions, build_plan
from scripts.benchmark.plan.train_only import Recorder, recording_key
from scripts.benchmark.report.headline import TRAIN_ONLY_NOTE
from scripts.benchmark.run import build_app
from scripts.benchmark.spec import BACKENDS, LAYOUTS, load_preset, preset_names, spec_hash, spec_json, with_overrides
from scripts.benchmark.spec.benchmark import BenchmarkSpec
from tests.benchmark.standins.plans import RUN_PY, STANDINS, reprove
from tests.benchmark.toy_framework import ADAPTER as TOY
from typer.testing import CliRunner

from miles.utils.bench_metrics import read_records

MILES_TEMPLATE = "/miles/{rollout_id}.pt"


def _plan(preset: str, layout: str, spec=None, out: Path = Path("/out")) -> dict:
    spec = spec or with_overrides(load_preset(preset), layout=layout, train_only=True)
    sides = registry.option_pair(compare_verl=True, miles_version=None)
    return build_plan(spec, preset, PlanOptions(backends=BACKENDS, layout=layout, output_dir=out, sides=sides))


def replayable(preset: str, layout: str) -> bool:
    """VERL replays one converted batch per step: not where separate_async samples several per step."""
    return layout == "colocate" or load_preset(preset).batch.optimizer_steps_per_step == 1


def _invoke(*args: str):
    return CliRunner().invoke(build_app(), list(args))


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


class TestSpec:
    def test_train_only_is_its_own_hash_and_the_full_loop_spec_is_unchanged(self):
        spec = load_preset("smoke")
        replay = with_overrides(spec, train_only=True)
        assert "recording" not in spec_json(spec) and "mode" not in spec_json(spec)["run"]
        assert spec_json(replay)["run"]["mode"] == "train-only"
        assert spec_json(replay)["recording"] == {"cache_dir": "/root/.cache/bench-recordings"}
        assert spec_hash(replay) != spec_hash(spec)

    def test_where_recordings_are_kept_is_not_measured(self):
        data = with_overrides(load_preset("smoke"), train_only=True).model_dump()
        moved = BenchmarkSpec.model_validate({**data, "recording": {"cache_dir": "/elsewhere/recordings"}})
        assert spec_hash(moved) == spec_hash(BenchmarkSpec.model_validate(data))

    @pytest.mark.parametrize("cache_dir", ["relative/dir", "/a b", "/a/$(x)", "/a/../b", "/a'b"])
    def test_a_cache_folder_no_shell_line_can_carry_is_refused(self, cache_dir):
        data = with_overrides(load_preset("smoke"), train_only=True).model_dump()
        with pytest.raises(ValidationError, match="recording.cache_dir"):
            BenchmarkSpec.model_validate({**data, "recording": {"cache_dir": cache_dir}})

    def test_a_recording_section_needs_the_train_only_mode_and_back(self):
        data = load_preset("smoke").model_dump()
        with pytest.raises(ValidationError, match="run.mode=throughput with a recording section"):
            BenchmarkSpec.model_validate({**data, "recording": {}})
        with pytest.raises(ValidationError, match="run.mode=train-only with no recording section"):
            BenchmarkSpec.model_validate({**data, "run": {**data["run"], "mode": "train-only"}})


@pytest.mark.parametrize("preset", preset_names())
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_cell_replays_the_recording_the_candidate_records(preset, layout):
    if not replayable(preset, layout):
        with pytest.raises(UserError, match="VERL replays 4 batches per step here"):
            _plan(preset, layout)
        return
    plan = _plan(preset, layout)
    data, recording = plan.data, plan.data["recording"]
    root = recording["root"]
    assert root == f"/root/.cache/bench-recordings/{recording['key']}"
    record = recording["record_cell"]
    assert (record["framework"], record["backend"], record["layout"]) == ("miles", "fsdp", layout)
    assert record["script"] == "recording/record.sh" and record["prepare"] == ["download-model", "download-dataset"]
    assert _value(record["argv"], "--save-debug-rollout-data") == root + MILES_TEMPLATE
    assert "--load-debug-rollout-data" not in record["argv"]
    num_steps = data["spec"]["run"]["num_steps"]
    for cell in data["cells"]:
        argv = cell["argv"]
        if cell["framework"] == "miles":
            assert _value(argv, "--load-debug-rollout-data") == root + MILES_TEMPLATE
            assert "--save-debug-rollout-data" not in argv
        else:
            skip = {t.partition("=")[0]: t.partition("=")[2] for t in argv if t.startswith("skip.")}
            steps = "[" + ",".join(map(str, range(1, num_steps + 1))) + "]"
            assert skip == {
                "skip.rollout_tq.enable": "True",
                "skip.rollout_tq.dump_dir": f"{root}/verl",
                "skip.rollout_tq.steps": steps,
                "skip.rollout_tq.action": "cache",
            }
    names = [step["name"] for step in data["prepare"]]
    assert names == [
        "download-model",
        "download-dataset",
        "convert-data",
        "record-rollout",
        "digest-recording",
        "convert-recording-verl-fsdp",
        "convert-recording-verl-megatron",
    ]
    assert data["prepare"][3]["creates"] == f"{root}/miles/{num_steps - 1}.pt"
    assert data["prepare"][3]["argv"] == ["bash", "/out/recording/record.sh"]
    for step in data["prepare"][4:]:
        assert (
            _value(step["argv"], "--source") == f"{root}/miles" and _value(step["argv"], "--source-format") == "miles"
        )
        assert _value(step["argv"], "--digest-file") == f"{root}/digest.txt"


def test_the_recording_key_is_what_determines_the_rollout():
    """The same spec replans to the same recording (reused across runs and nights); a change to what is generated,
    or to who generates it where, with which code, is another recording; where recordings are kept is not part of
    it."""
    spec = with_overrides(load_preset("smoke"), train_only=True)
    side = registry.option_pair(compare_verl=True, miles_version=None).candidate
    miles = Recorder(side, "/ci/miles", "a" * 40)
    key = recording_key(spec, miles, "fsdp", "colocate")
    assert key == recording_key(with_overrides(load_preset("smoke"), train_only=True), miles, "fsdp", "colocate")
    assert key != recording_key(with_overrides(spec, num_steps=20), miles, "fsdp", "colocate")
    assert key != recording_key(spec, miles, "megatron", "colocate")
    assert key != recording_key(spec, miles, "fsdp", "disaggregated")
    released = Recorder(side.model_copy(update={"target": "0.0.2"}), "/ci/miles", "a" * 40)
    assert key != recording_key(spec, released, "fsdp", "colocate")
    assert key != recording_key(spec, Recorder(side, "/ci/other", "a" * 40), "fsdp", "colocate")
    assert key != recording_key(spec, Recorder(side, "/ci/miles", "b" * 40), "fsdp", "colocate")
    moved = BenchmarkSpec.model_validate({**spec.model_dump(), "recording": {"cache_dir": "/other"}})
    assert recording_key(moved, miles, "fsdp", "colocate") == key


def _git_checkout(path: Path, *commits: str) -> list[str]:
    """A git repository at `path` with one commit per message; the commits' ids."""
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    path.mkdir(parents=True)
    subprocess.run([*git, "init", "-q"], check=True)
    ids = []
    for message in commits:
        (path / "train.py").write_text(message + "\n")
        subprocess.run([*git, "add", "train.py"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", message], check=True)
        ids.append(subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip())
    return ids


def test_each_checkout_and_commit_records_its_own_rollout(tmp_path):
    """A PR head, another PR and the nightly plan the same spec from their own checkouts: each replays the rollout
    its own code generated; the same checkout at the same commit finds the recording again from another plan
    folder; a checkout whose code no commit names (uncommitted changes, or no git) records for its plan only."""
    head, other = _git_checkout(tmp_path / "pr", "head", "other-pr")
    (nightly,) = _git_checkout(tmp_path / "nightly", "main")

    def planned(name: str, miles_root: Path) -> tuple[dict, str]:
        result = _invoke("--preset", "smoke", "--backend", "fsdp", "--output-dir", str(tmp_path / name),
                         "--dry-run", "--train-only", "--miles-root", str(miles_root))  # fmt: skip
        assert result.exit_code == 0, result.output
        return json.loads((tmp_path / name / "plan.json").read_text())["recording"], result.output

    at_other, _ = planned("p1", tmp_path / "pr")
    subprocess.run(["git", "-C", str(tmp_path / "pr"), "checkout", "-q", head], check=True)
    at_head, said = planned("p2", tmp_path / "pr")
    again, _ = planned("p3", tmp_path / "pr")
    at_nightly, _ = planned("p4", tmp_path / "nightly")
    assert (at_head["commit"], at_other["commit"], at_nightly["commit"]) == (head, other, nightly)
    assert len({at_head["key"], at_other["key"], at_nightly["key"]}) == 3
    assert (again["key"], again["root"]) == (at_head["key"], at_head["root"]) and again["shared"] is True
    assert f"{tmp_path / 'pr'} at {head[:12]}), key {at_head['key']}" in said
    (tmp_path / "pr" / "train.py").write_text("edited\n")
    dirty, said = planned("p5", tmp_path / "pr")
    dirty_again, _ = planned("p6", tmp_path / "pr")
    assert dirty["commit"] is None and dirty["shared"] is False and dirty["key"] != dirty_again["key"]
    assert "recorded for this plan folder only" in said
    no_git, _ = planned("p7", tmp_path / "nowhere")
    assert no_git["shared"] is False and no_git["key"] not in (at_head["key"], dirty["key"])


def test_the_parity_table_names_what_each_side_does_besides_training():
    for pair in _plan("smoke", "colocate").parity.pairs:
        (row,) = [row for row in pair.rows if row.knob == "rollout_replay"]
        assert row.status == "asymmetry" and "kept out of the training-step comparison" in row.note
        assert row.candidate.startswith("recorded rollout, no SGLang engine (debug_train_only)")
        assert "engines started and idle, weights synced" in row.reference
        assert row.candidate_launch.startswith("--load-debug-rollout-data ")
        assert row.reference_launch.startswith("skip.rollout_tq.enable=True skip.rollout_tq.dump_dir=")
    full_loop = build_plan(
        load_preset("smoke"),
        "smoke",
        PlanOptions(BACKENDS, "colocate", Path("/out"), registry.option_pair(compare_verl=True, miles_version=None)),
    )
    assert all(row.knob != "rollout_replay" for pair in full_loop.parity.pairs for row in pair.rows)


def test_a_side_without_record_and_replay_is_bad_input_and_nothing_is_written(tmp_path):
    registry.register(TOY)
    try:
        result = _invoke("--preset", "smoke", "--backend", "fsdp", "--candidate", "toy@a", "--reference", "toy@b",
                         "--output-dir", str(tmp_path / "o"), "--dry-run", "--train-only")  # fmt: skip
        plain = _invoke("--preset", "smoke", "--backend", "fsdp", "--candidate", "toy@a", "--reference", "toy@b",
                        "--output-dir", str(tmp_path / "p"), "--dry-run")  # fmt: skip
    finally:
        registry.unregister(TOY.name)
    assert result.exit_code == 2, result.output
    assert "run.mode train-only: Toy a has no record-and-replay of rollouts in this harness" in result.output
    assert not (tmp_path / "o").exists() and plain.exit_code == 0, plain.output


def _small_recording():
    from scripts.benchmark.frameworks.recorded import RecordedSample, RecordedStep, Recording

    def sample(group: int, index: int) -> RecordedSample:
        response = (7 + index, 8, 9 + group)
        return RecordedSample((1, 2, 3 + group), response, (1, 1, 1), float(index % 2), group, (-0.5, -0.25, -1.0))

    return Recording(tuple(RecordedStep(tuple(sample(g, i) for g in (0, 1) for i in (0, 1))) for _ in range(2)))


def test_prepare_recording_keeps_the_digest_and_refuses_another_recording(tmp_path):
    """The digest step writes the recording's digest; a conversion is read back and checked against it; a recording
    whose digest is not the kept one is refused before anything is written."""
    pytest.importorskip("torch")
    from scripts.benchmark.frameworks.recording import recording_digest, write_recording

    source, digest_file = tmp_path / "rec" / "miles", tmp_path / "rec" / "digest.txt"
    write_recording(_small_recording(), source, "miles")
    digest = recording_digest(source, "miles")
    base = [
        "prepare-recording",
        "--source",
        str(source),
        "--source-format",
        "miles",
        "--digest-file",
        str(digest_file),
    ]
    first = _invoke(*base)
    assert first.exit_code == 0, first.output
    assert digest_file.read_text() == digest + "\n" and f"recording {digest}" in first.output
    converted = _invoke(*base, "--target", str(tmp_path / "rec" / "copy"), "--target-format", "miles")
    assert converted.exit_code == 0, converted.output
    assert recording_digest(tmp_path / "rec" / "copy", "miles") == digest
    digest_file.write_text("0" * len(digest) + "\n")
    refused = _invoke(*base, "--target", str(tmp_path / "rec" / "other"), "--target-format", "miles")
    assert (
        refused.exit_code == 2
        and f"--digest-file {digest_file}: the recording at {source} has digest" in refused.output
    )
    assert not (tmp_path / "rec" / "other").exists() and digest_file.read_text() == "0" * len(digest) + "\n"


class TestCommandLine:
    def test_prepare_recording_needs_target_and_its_format_together(self, tmp_path):
        result = _invoke("prepare-recording", "--source", str(tmp_path), "--source-format", "miles",
                         "--target", str(tmp_path / "t"), "--digest-file", str(tmp_path / "d"))  # fmt: skip
        assert result.exit_code == 2 and "give --target and --target-format together" in result.output
        assert not (tmp_path / "t").exists() and not (tmp_path / "d").exists()

    def test_dry_run_writes_the_recording_script_and_says_where_the_recording_is(self, tmp_path):
        out = tmp_path / "out"
        result = _invoke("--compare-verl", "--preset", "smoke", "--output-dir", str(out), "--dry-run", "--train-only")
        assert result.exit_code == 0, result.output
        plan = json.loads((out / "plan.json").read_text())
        key = plan["recording"]["key"]
        assert f"train-only: every cell replays one recording by miles (fsdp, colocate), key {key}" in result.output
        script = out / "recording" / "record.sh"
        assert os.access(script, os.X_OK)
        text = script.read_text()
        assert f"BENCH_CELL_DEFAULT=/root/.cache/bench-recordings/{key}/run" in text
        assert "--save-debug-rollout-data" in text and "pkill" not in text
        assert subprocess.run(["bash", "-n", str(script)]).returncode == 0

    def test_a_recording_already_made_here_gives_the_plan_its_digest(self, tmp_path):
        """A node that recorded this spec before: the plan names the digest of the recording its cells will replay."""
        data = with_overrides(load_preset("smoke"), train_only=True).model_dump(mode="json")
        data["recording"] = {"cache_dir": str(tmp_path / "rec")}
        spec = tmp_path / "spec.yaml"
        spec.write_text(json.dumps(data))
        _git_checkout(tmp_path / "miles", "main")
        miles = ["--miles-root", str(tmp_path / "miles")]
        first = _invoke("--spec", str(spec), "--output-dir", str(tmp_path / "a"), "--dry-run", *miles)
        recording = json.loads((tmp_path / "a" / "plan.json").read_text())["recording"]
        assert first.exit_code == 0 and recording["digest"] is None and "recorded by the first run" in first.output
        Path(recording["digest_file"]).parent.mkdir(parents=True)
        Path(recording["digest_file"]).write_text("feedc0de\n")
        again = _invoke("--spec", str(spec), "--output-dir", str(tmp_path / "b"), "--dry-run", *miles)
        replanned = json.loads((tmp_path / "b" / "plan.json").read_text())["recording"]
        assert again.exit_code == 0 and replanned["digest"] == "feedc0de" and "digest feedc0de" in again.output
        assert (replanned["key"], replanned["root"]) == (recording["key"], recording["root"])

    def test_the_recording_pass_goes_through_the_frameworks_own_checks_too(self, tmp_path):
        """VERL as the recorder: its strict compose checks the replay cell and the recording launch."""
        argv = ["--preset", "smoke", "--backend", "fsdp", "--candidate", "verl", "--reference", "miles", "--dry-run"]
        result = _invoke(*argv, "--output-dir", str(tmp_path / "o"), "--train-only")
        assert result.exit_code == 0, result.output
        assert "VERL strict compose: ok for 2 cell(s)" in result.output
        record = json.loads((tmp_path / "o" / "plan.json").read_text())["recording"]["record_cell"]
        assert record["framework"] == "verl" and "skip.rollout_tq.action=cache" in record["argv"]

    def test_learning_run_and_train_only_together_is_bad_input(self, tmp_path):
        result = _invoke("--preset", "smoke", "--output-dir", str(tmp_path / "o"), "--dry-run", "--train-only")
        assert result.exit_code == 0, result.output
        result = _invoke(
            "--preset", "smoke", "--output-dir", str(tmp_path / "p"), "--dry-run", "--train-only", "--learning-run"
        )
        assert result.exit_code == 2 and "either --learning-run or --train-only" in result.output
        assert not (tmp_path / "p").exists()

    def test_a_bad_recording_folder_in_a_spec_file_is_exit_2_naming_it(self, tmp_path):
        data = with_overrides(load_preset("smoke"), train_only=True).model_dump(mode="json")
        data["recording"] = {"cache_dir": "/rec;rm -rf /"}
        spec = tmp_path / "spec.yaml"
        spec.write_text(json.dumps(data))
        result = _invoke("--spec", str(spec), "--output-dir", str(tmp_path / "o"), "--dry-run")
        assert result.exit_code == 2 and "recording.cache_dir" in result.output
        assert "Traceback" not in result.output and not (tmp_path / "o").exists()

    def test_train_only_on_a_spec_file_that_says_where_recordings_are_kept(self, tmp_path):
        """A throughput spec that already names its recording cache: --train-only plans it there (the mode applies
        before the spec is validated), rather than refusing it as a throughput run with a recording section."""
        data = load_preset("smoke").model_dump(mode="json")
        data["recording"] = {"cache_dir": str(tmp_path / "recordings")}
        spec = tmp_path / "spec.yaml"
        spec.write_text(json.dumps(data))
        result = _invoke("--spec", str(spec), "--output-dir", str(tmp_path / "o"), "--dry-run", "--train-only")
        assert result.exit_code == 0, result.output
        plan = json.loads((tmp_path / "o" / "plan.json").read_text())
        assert plan["spec"]["run"]["mode"] == "train-only"
        assert plan["recording"]["root"].startswith(str(tmp_path / "recordings") + "/")
        refused = _invoke("--spec", str(spec), "--output-dir", str(tmp_path / "p"), "--dry-run")
        assert refused.exit_code == 2 and "run.mode=throughput with a recording section" in refused.output


STEP_S = 0.03
STANDIN_LEARNING = {
    "miles": {"policy_loss": 0.0125, "grad_norm": 0.91, "approx_kl": 0.0, "clip_fraction": 0.10},
    "verl": {"policy_loss": 0.0127, "grad_norm": 0.93, "approx_kl": 0.0, "clip_fraction": 0.30},
}
"""What each stand-in trainer logs: close on loss and grad norm, a clip fraction three times as high on one side."""


def _run_py(*args: str, python: Path | str = sys.executable) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), str(RUN_PY), *args], capture_output=True, text=True, timeout=180)


def _recording_python() -> Path:
    """An interpreter with the `recording` extra (torch and tensordict: VERL's dump format), as a train-only run's
    harness has: the VERL check interpreter; skipped without it, unless MILES_BENCH_REQUIRE_VERL_CHECKS=1."""
    from scripts.benchmark.frameworks.verl.own_checks import find_check_python

    python = find_check_python()
    if python is None:
        if os.environ.get("MILES_BENCH_REQUIRE_VERL_CHECKS") == "1":
            pytest.fail("MILES_BENCH_REQUIRE_VERL_CHECKS=1 but no VERL check interpreter (.cache/verl-check-venv)")
        pytest.skip("no interpreter with the recording extra (.cache/verl-check-venv, tests/benchmark/setup_env.sh)")
    return python


def _plan_standin_run(tmp_path: Path, name: str, *extra: str) -> tuple[Path, dict]:
    """A dry-run plan of the smoke spec with the recording cache under tmp_path, its framework commands replaced by
    the stand-in trainer (the real sinks), executed without its prepare steps."""
    data = with_overrides(load_preset("smoke"), num_steps=12).model_dump(mode="json")
    data["data"]["end"] = 48
    if "--train-only" in extra:
        data |= {"run": {**data["run"], "mode": "train-only"}, "recording": {"cache_dir": str(tmp_path / "rec")}}
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps(data))
    plan_dir = tmp_path / f"{name}-plan"
    planned = _run_py("--spec", str(spec), "--backend", "fsdp", "--compare-verl", "--output-dir", str(plan_dir),
                      "--dry-run", *extra)  # fmt: skip
    assert planned.returncode == 0, planned.stdout + planned.stderr
    plan = json.loads((plan_dir / "plan.json").read_text())
    for cell in plan["cells"]:
        sink = cell["sink"]
        argv = [sys.executable, str(STANDINS / "standin_trainer.py"), "--format", sink["format"], "--sink"]
        argv += [sink["path"], "--steps", str(cell["num_steps"]), "--step-s", str(STEP_S), "--startup-s", "0.01"]
        argv += ["--learning", json.dumps(STANDIN_LEARNING[cell["framework"]])] + (
            ["--replay"] if cell.get("replay") else []
        )
        cell["argv"], cell["launch_argv"] = argv, list(argv)
    (plan_dir / "plan.json").write_text(json.dumps(plan, indent=2))
    reprove(plan_dir)
    return plan_dir, plan


def _execute(plan_dir: Path, run_dir: Path, *prepare: str, python: Path | str = sys.executable, code: int = 0):
    options = [*(prepare or ["--skip-prepare"]), "--no-preflight", "--poll-interval-s", "0.05", "--repeats", "1"]
    executed = _run_py("execute", str(plan_dir / "plan.json"), "--output-dir", str(run_dir), *options, python=python)
    assert executed.returncode == code, executed.stdout + executed.stderr
    return executed


def _steps_recording(steps: int, reward: float = 1.0):
    from scripts.benchmark.frameworks.recorded import RecordedSample, RecordedStep, Recording

    def sample(step: int, group: int, index: int) -> RecordedSample:
        response = (7 + index, 8 + step, 9 + group)
        return RecordedSample((1, 2, 3 + group), response, (1, 1, 1), reward * (index % 2), group, (-0.5, -0.2, -1.0))

    return Recording(tuple(RecordedStep(tuple(sample(s, g, i) for g in (0, 1) for i in (0, 1))) for s in range(steps)))


def _standin_recording_pass(tmp_path: Path, plan_dir: Path, plan: dict) -> str:
    """The recording pass replaced by a script that copies a Miles recording of the spec's steps (written here)
    where the recorder dumps it; the plan's own digest and conversion steps then run for real, and its other
    prepare steps (downloads, data) are dropped. Returns the recording's digest."""
    from scripts.benchmark.frameworks.recording import recording_digest, write_recording

    staged = tmp_path / "staged-recording"
    write_recording(_steps_recording(plan["cells"][0]["num_steps"]), staged, "miles")
    source = Path(plan["recording"]["source"])
    lines = ["#!/usr/bin/env bash", "set -euo pipefail", f"mkdir -p {shlex.quote(str(source.parent))}"]
    lines += [f"cp -R {shlex.quote(str(staged))} {shlex.quote(str(source))}"]
    (plan_dir / "recording" / "record.sh").write_text("\n".join(lines) + "\n")
    plan["prepare"] = [step for step in plan["prepare"] if "record" in step["name"]]
    (plan_dir / "plan.json").write_text(json.dumps(plan, indent=2))
    reprove(plan_dir)
    return recording_digest(staged, "miles")


def test_a_stand_in_replay_run_reports_the_train_only_section(tmp_path):
    """The replay pass run by the harness with stand-in trainers (a full-loop run of the spec beside it): the
    recording's digest reaches the manifest and the report, whose train-only section holds the run's own
    training-phase ratios, the full-loop run's beside them, and the first-step agreement as logged."""
    full_plan, _ = _plan_standin_run(tmp_path, "full")
    _execute(full_plan, tmp_path / "full")
    assert _run_py("report", str(tmp_path / "full"), "--quiet").returncode == 0
    replay_plan, plan = _plan_standin_run(tmp_path, "replay", "--train-only")
    assert plan["recording"]["root"].startswith(str(tmp_path / "rec") + "/")
    digest = _standin_recording_pass(tmp_path, replay_plan, plan)
    run_dir = tmp_path / "replay"
    _execute(replay_plan, run_dir, "--prepare", python=_recording_python())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [(step["name"], step["state"]) for step in manifest["prepare"]] == [
        ("record-rollout", "complete"),
        ("digest-recording", "complete"),
        ("convert-recording-verl-fsdp", "complete"),
    ]
    assert (run_dir / "recording" / "record.sh").read_bytes() == (replay_plan / "recording" / "record.sh").read_bytes()
    assert manifest["recording"] == {
        "key": plan["recording"]["key"],
        "root": plan["recording"]["root"],
        "digest": digest,
    }
    assert all(cell.get("replay") is True for cell in plan["cells"])
    for cell in plan["cells"]:
        records = read_records(run_dir / "cells" / cell["id"] / "rep-0" / "metrics.jsonl")
        assert records and not [f for r in records for f in r.flags if f.startswith("missing:")]
        assert {r.phases_s["generate"] for r in records} == {None} and {str(r.policy_lag) for r in records} == {"{}"}
    reported = _run_py("report", str(run_dir), "--full-loop", str(tmp_path / "full"), "--quiet")
    assert reported.returncode == 0, reported.stdout + reported.stderr
    report = json.loads((run_dir / "report.json").read_text())
    full = json.loads((tmp_path / "full" / "report.json").read_text())
    assert full["train_only"] is None
    view = report["train_only"]
    assert (view["recording_key"], view["digest"], view["recorder"]) == (plan["recording"]["key"], digest, "miles")
    assert view["full_loop_run"] == str(tmp_path / "full")
    own = {c["metric"]: c for c in report["comparisons"]}
    beside = {c["metric"]: c for c in full["comparisons"]}
    assert [row["metric"] for row in view["rows"]] == [m for m in own if m in TRAINING_METRICS]
    assert {"phases_s.train", "phases_s.old_logprob", "train_tokens_per_s"} <= {r["metric"] for r in view["rows"]}
    for row in view["rows"]:
        metric = row["metric"]
        assert (row["ratio"], row["ci_low"], row["ci_high"]) == tuple(
            own[metric][k] for k in ("ratio", "ci_low", "ci_high")
        )
        assert row["full_loop_ratio"] == beside[metric]["ratio"]
    assert "step_time_s" not in {r["metric"] for r in view["rows"]}
    first = {f["signal"]: f for f in view["first_step"]}
    assert first["policy_loss"]["step"] == 1 and first["policy_loss"]["agrees"] is True
    assert first["policy_loss"]["difference"] == pytest.approx(0.0125 - 0.0127)
    assert first["grad_norm"]["difference"] == pytest.approx((0.91 - 0.93) / 0.93)
    assert first["clip_fraction"]["agrees"] is False
    assert first["clip_fraction"]["difference"] == pytest.approx((0.10 - 0.30) / 0.30)
    assert first["approx_kl"]["agrees"] is True and first["approx_kl"]["difference"] == 0.0
    markdown = (run_dir / "report.md").read_text()
    glance = markdown.split("## At a glance", 1)[1].split("\n## ", 1)[0]
    assert "**fsdp / colocate: training step**" in glance and "train tokens/s" in glance
    assert "step time" not in glance.split("Train-only run:")[0].lower()  # the card leads with the training step
    pair_table = markdown.split("## Miles vs VERL: fsdp / colocate", 1)[1].split("\n### ", 1)[0].splitlines()
    (step_row,) = [line for line in pair_table if line.startswith("| `step_time_s` |")]
    (train_row,) = [line for line in pair_table if line.startswith("| `phases_s.train` |")]
    assert step_row.endswith("| n/a: " + NOT_COMPARED + " |") and "n/a" not in train_row.split("|")[-2]
    assert "Training step" in _run_py("report", str(run_dir)).stdout
    assert "## Train-only: the training step on one recorded rollout" in markdown and f"`{digest}`" in markdown
    assert "| clip_fraction | 1 |" in markdown and "DIFFERS" in markdown
    assert TRAIN_ONLY_NOTE in markdown and TRAIN_ONLY_NOTE in reported.stdout + _run_py("report", str(run_dir)).stdout
    assert TRAIN_ONLY_NOTE not in (tmp_path / "full" / "report.md").read_text()
    before = (run_dir / "report.json").read_bytes()
    another_spec, other_sides = tmp_path / "another-spec", tmp_path / "other-sides"
    for folder, change in (
        (another_spec, lambda doc: doc.update(spec_hash="0123456789ab")),  # another model, another batch, ...
        (other_sides, lambda doc: doc["sides"][1].update(framework="miles", name="miles-base", target="0.0.2")),
    ):
        folder.mkdir()
        document = json.loads((tmp_path / "full" / "report.json").read_text())
        change(document)
        (folder / "report.json").write_text(json.dumps(document))
    refusals = (
        (tmp_path / "nowhere", "no report.json there"),
        (run_dir, "a train-only run"),
        (another_spec, "a run of spec 0123456789ab, not of this train-only run's spec as a full loop"),
        (other_sides, "its sides (framework, target, checkout) are not this run's"),
    )
    for other, words in refusals:
        refused = _run_py("report", str(run_dir), "--full-loop", str(other))
        assert refused.returncode == 2 and f"--full-loop {other}: {words}" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr and (run_dir / "report.json").read_bytes() == before


def test_a_recording_damaged_after_it_was_made_is_never_replayed(tmp_path):
    """One file of the recording truncated and another deleted after a first run made it: every prepare step is
    skipped (its output exists), so the runner reads the recording itself before the first cell and stops with
    exit 2 naming the file and the fix; no cell runs."""
    python = _recording_python()
    replay_plan, plan = _plan_standin_run(tmp_path, "replay", "--train-only")
    _standin_recording_pass(tmp_path, replay_plan, plan)
    _execute(replay_plan, tmp_path / "first", "--prepare", python=python)
    miles = Path(plan["recording"]["source"])
    (miles / "3.pt").write_bytes((miles / "3.pt").read_bytes()[:64])
    (miles / "0.pt").unlink()
    refused = _execute(replay_plan, tmp_path / "second", "--prepare", python=python, code=2)
    assert f"error: the recording miles-fsdp-colocate replays is damaged: {miles / '0.pt'}: step: missing" in (
        refused.stderr
    ), refused.stderr
    assert f"delete {plan['recording']['root']} so that the next run records it again" in refused.stderr
    manifest = json.loads((tmp_path / "second" / "manifest.json").read_text())
    assert {step["state"] for step in manifest["prepare"]} == {"skipped"}
    assert {cell["state"] for cell in manifest["cells"]} == {"pending"} and not (
        tmp_path / "second" / "cells"
    ).exists()
    assert any(warning.startswith("recording: ") for warning in manifest["warnings"])


def test_a_recording_changed_between_two_cells_stops_the_cell_that_would_replay_it(tmp_path):
    """The VERL conversion swapped for another recording's while the Miles cell runs: the VERL cell is not started,
    it fails naming the folder and the kept digest, and the run exits 2."""
    python = _recording_python()
    replay_plan, plan = _plan_standin_run(tmp_path, "replay", "--train-only")
    _standin_recording_pass(tmp_path, replay_plan, plan)
    hold = tmp_path / "hold"
    hold.write_text("")
    miles_cell = next(cell for cell in plan["cells"] if cell["framework"] == "miles")
    miles_cell["launch_argv"] += ["--hold-after", "2", "--hold-file", str(hold)]
    miles_cell["argv"] = list(miles_cell["launch_argv"])
    (replay_plan / "plan.json").write_text(json.dumps(plan, indent=2))
    reprove(replay_plan)
    from scripts.benchmark.frameworks.recording import write_recording

    write_recording(_steps_recording(miles_cell["num_steps"], reward=2.0), tmp_path / "other", "miles")
    converted = next(step for step in plan["prepare"] if step["name"].startswith("convert-recording-verl"))
    target = Path(converted["argv"][converted["argv"].index("--target") + 1])
    other = tmp_path / "other-verl"
    assert _run_py("convert-recording", str(tmp_path / "other"), "--from", "miles", "--to", "verl", "--out",
                   str(other / target.name), python=python).returncode == 0  # fmt: skip
    run_dir = tmp_path / "run"
    argv = [str(python), str(RUN_PY), "execute", str(replay_plan / "plan.json"), "--output-dir", str(run_dir)]
    argv += ["--prepare", "--no-preflight", "--poll-interval-s", "0.05", "--repeats", "1"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as harness:
        metrics = run_dir / "cells" / miles_cell["id"] / "rep-0" / "metrics.jsonl"
        deadline = time.monotonic() + 120
        while not (metrics.exists() and metrics.read_text().count("\n") >= 1) and time.monotonic() < deadline:
            time.sleep(0.1)
        shutil.rmtree(target)
        (other / target.name).rename(target)
        hold.unlink()
        stdout, stderr = harness.communicate(timeout=120)
    assert harness.returncode == 2, stdout + stderr
    cells = {cell["id"]: cell for cell in json.loads((run_dir / "manifest.json").read_text())["cells"]}
    verl = next(cell for name, cell in cells.items() if name.startswith("verl"))
    assert cells[miles_cell["id"]]["state"] == "complete" and verl["state"] == "failed"
    assert verl["reason"].startswith(f"the recording at {target} has digest ") and "digest.txt" in verl["reason"]
    assert f"delete {target} so that the next run converts the recording again" in stderr
    assert not (run_dir / verl["dir"] / "log.txt").exists()
