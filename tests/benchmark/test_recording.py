"""One recorded rollout, both frameworks: recordings made by each framework's own dump code on CPU, converted with
`run.py convert-recording`, then loaded by the other framework's own loader and checked token for token.

Miles's side runs `save_debug_rollout_data` / `load_debug_rollout_data` where Miles is importable: this tree when it
is a Miles checkout, else Miles's CPU-CI environment (.cache/miles-overlay-venv, tests/benchmark/setup_env.sh) on
the snapshot in ../shared/upstream. VERL's side runs `RolloutTqSkip` (`prepare_data`, `maybe_load_and_inject`)
against a real TransferQueue on a local Ray, in the VERL check interpreter (.cache/verl-check-venv), which also has
the tensordict the VERL format needs. Each side skips without its environment, unless
MILES_BENCH_REQUIRE_MILES_OVERLAY=1 / MILES_BENCH_REQUIRE_VERL_CHECKS=1.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch
from scripts.benchmark.errors import UserError
from scripts.benchmark.frameworks import registry
from scripts.benchmark.frameworks.recorded import RecordedSample, RecordedStep, Recording, digest_of, float32
from scripts.benchmark.frameworks.recording import read_recording, recording_digest, write_recording
from scripts.benchmark.frameworks.verl.config import find_verl_root
from scripts.benchmark.frameworks.verl.own_checks import find_check_python
from scripts.benchmark.frameworks.verl.recording import project_dump_dir
from tests.benchmark.toy_framework.adapter import ToyAdapter

REPO_ROOT = Path(__file__).resolve().parents[2]
RUN_PY = REPO_ROOT / "scripts" / "benchmark" / "run.py"
CHILDREN = Path(__file__).resolve().parent / "recording_children"
UPSTREAM = Path(os.environ.get("MILES_BENCH_UPSTREAM", REPO_ROOT.parent / "shared" / "upstream"))
OVERLAY_VENV = Path(os.environ.get("MILES_BENCH_OVERLAY_VENV", REPO_ROOT / ".cache" / "miles-overlay-venv"))
EXPERIMENT, PROJECT, MAX_LENGTH = "recording", "bench", 16  # as recording_children/verl_rollout_tq.py configures

# Two rollouts of two prompts x two samples, as Miles's rollout hands them over: a loss mask with a tool token (0),
# a reward float32 cannot hold exactly (0.1), rollout log-probs.
MILES_STEPS = [
    [
        dict(group_index=0, index=0, tokens=[1, 2, 3, 10, 11], response_length=2, loss_mask=[1, 1], reward=1.0,
             rollout_log_probs=[-0.5, -0.25]),
        dict(group_index=0, index=1, tokens=[1, 2, 3, 12], response_length=1, loss_mask=[1], reward=0.0,
             rollout_log_probs=[-1.5]),
        dict(group_index=1, index=2, tokens=[4, 5, 20, 21, 22], response_length=3, loss_mask=[1, 0, 1], reward=0.1,
             rollout_log_probs=[-0.1, -0.2, -0.3]),
        dict(group_index=1, index=3, tokens=[4, 5, 23], response_length=1, loss_mask=[1], reward=1.0,
             rollout_log_probs=[-0.7]),
    ],
    [
        dict(group_index=2, index=4, tokens=[7, 30, 31], response_length=2, loss_mask=[1, 1], reward=0.5,
             rollout_log_probs=[-0.05, -2.0]),
        dict(group_index=2, index=5, tokens=[7, 32], response_length=1, loss_mask=[1], reward=-1.0,
             rollout_log_probs=[-3.0]),
        dict(group_index=3, index=6, tokens=[8, 9, 40], response_length=1, loss_mask=[1], reward=0.0,
             rollout_log_probs=[-0.9]),
        dict(group_index=3, index=7, tokens=[8, 9, 41, 42], response_length=2, loss_mask=[0, 1], reward=1.0,
             rollout_log_probs=[-0.3, -0.4]),
    ],
]  # fmt: skip

# One VERL step as its replay buffer samples it: the groups' trajectories interleaved (sampling keeps no uid order).
VERL_STEPS = [
    [
        dict(uid="aaa", session=0, prompt_ids=[1, 2], response_ids=[3, 4, 5], response_mask=[1, 0, 1], reward=1.0,
             log_probs=[-0.1, -0.2, -0.3]),
        dict(uid="bbb", session=0, prompt_ids=[6], response_ids=[7], response_mask=[1], reward=0.0, log_probs=[-0.4]),
        dict(uid="aaa", session=1, prompt_ids=[1, 2], response_ids=[8], response_mask=[1], reward=0.25,
             log_probs=[-0.5]),
        dict(uid="bbb", session=1, prompt_ids=[6], response_ids=[9, 10], response_mask=[1, 1], reward=0.3,
             log_probs=[-0.6, -0.7]),
    ]
]  # fmt: skip


def _missing(flag: str, reason: str):
    if os.environ.get(flag) == "1":
        pytest.fail(f"{flag}=1 but {reason}")
    pytest.skip(reason)


def _run(argv: list, env: dict | None = None, cwd: Path | str = "/") -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


def _clean_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    return {**env, **extra}


@pytest.fixture(scope="module")
def miles(tmp_path_factory):
    """(python, env) importing Miles: this tree when it is a Miles checkout, else the snapshot in the overlay venv."""
    if (REPO_ROOT / "miles" / "ray" / "rollout" / "debug_data.py").is_file():
        return sys.executable, _clean_env(PYTHONPATH=str(REPO_ROOT))
    snapshot = UPSTREAM / "miles-31f1ca9.tar.gz"
    if not (OVERLAY_VENV / "bin" / "python").is_file() or not snapshot.is_file():
        _missing("MILES_BENCH_REQUIRE_MILES_OVERLAY", f"no Miles overlay environment at {OVERLAY_VENV} or {snapshot}")
    root = tmp_path_factory.mktemp("miles-tree")
    with tarfile.open(snapshot) as archive:
        members = [m for m in archive.getmembers() if m.name.startswith("miles/miles/")]
        archive.extractall(root, members=members, filter="tar")
    return OVERLAY_VENV / "bin" / "python", _clean_env(PYTHONPATH=str(root / "miles"))


@pytest.fixture(scope="module")
def verl_python():
    python, root = find_check_python(), find_verl_root()
    if python is None or root is None:
        _missing("MILES_BENCH_REQUIRE_VERL_CHECKS", "no VERL check interpreter (.cache/verl-check-venv) or VERL wheel")
    return python, root


def _convert(python, source: Path, source_format: str, out: Path, target_format: str) -> subprocess.CompletedProcess:
    argv = [python, RUN_PY, "convert-recording", source, "--from", source_format, "--to", target_format, "--out", out]
    return _run(argv, _clean_env())


def _miles_save(miles, steps: list, folder: Path) -> None:
    spec = folder.parent / f"{folder.name}.json"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(json.dumps(steps))
    done = _run([miles[0], CHILDREN / "miles_debug_data.py", "save", spec, folder / "{rollout_id}.pt"], miles[1])
    assert done.returncode == 0, done.stderr[-3000:]


def _miles_load(miles, folder: Path, steps: int) -> list:
    done = _run([miles[0], CHILDREN / "miles_debug_data.py", "load", folder / "{rollout_id}.pt", steps], miles[1])
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def made(tmp_path_factory, miles, verl_python):
    """Miles's own dump converted to VERL and replayed by VERL's loader; VERL's own dump converted to Miles and
    loaded by Miles's loader; the digests each conversion printed."""
    tmp = tmp_path_factory.mktemp("recordings")
    python, verl_root = verl_python
    _miles_save(miles, MILES_STEPS, tmp / "miles-made" / "rollouts")
    replay_dir = project_dump_dir(tmp / "replay-dump", EXPERIMENT, PROJECT, 2, 2, MAX_LENGTH, MAX_LENGTH)
    to_verl = _convert(python, tmp / "miles-made" / "rollouts", "miles", replay_dir, "verl")
    assert to_verl.returncode == 0, to_verl.stderr[-3000:]

    job = {
        "dump": {"dump_dir": str(tmp / "verl-made"), "n": 2, "batch_size": 2, "steps": VERL_STEPS},
        "load": {"dump_dir": str(tmp / "replay-dump"), "n": 2, "batch_size": 2, "steps": len(MILES_STEPS)},
    }
    (tmp / "job.json").write_text(json.dumps(job))
    env = _clean_env(PYTHONPATH=str(verl_root), RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    child = _run([python, CHILDREN / "verl_rollout_tq.py", tmp / "job.json", tmp / "replayed.json"], env, cwd=tmp)
    assert child.returncode == 0, child.stdout[-2000:] + child.stderr[-3000:]
    verl_out = json.loads((tmp / "replayed.json").read_text())

    assert Path(verl_out["dumped_dir"]).parent.parent == tmp / "verl-made"
    # A `skip.rollout_tq.dump_dir` holding one dump reads as that dump.
    to_miles = _convert(python, tmp / "verl-made", "verl", tmp / "verl-as-miles", "miles")
    assert to_miles.returncode == 0, to_miles.stderr[-3000:]
    back = _convert(python, replay_dir, "verl", tmp / "miles-again", "miles")
    assert back.returncode == 0, back.stderr[-3000:]
    return {
        "tmp": tmp,
        "replay_dir": replay_dir,
        "verl_out": verl_out,
        "miles_loaded": _miles_load(miles, tmp / "verl-as-miles", len(VERL_STEPS)),
        "digests": {
            "to_verl": to_verl.stdout.strip(),
            "to_miles": to_miles.stdout.strip(),
            "back": back.stdout.strip(),
        },
    }


def test_verl_looks_for_the_converted_recording_where_project_dump_dir_put_it(made):
    assert Path(made["verl_out"]["replay_dir"]) == made["replay_dir"]


def test_a_miles_recording_replays_token_for_token_through_verls_own_loader(made):
    replayed = made["verl_out"]["replayed"]
    assert len(replayed) == len(MILES_STEPS)
    for step, trajectories in zip(MILES_STEPS, replayed, strict=True):
        assert len(trajectories) == len(step)
        for sample, trajectory in zip(step, trajectories, strict=True):  # prompt i's sessions 0, 1 = group i in order
            length = sample["response_length"]
            assert trajectory["prompt_ids"] == sample["tokens"][:-length]
            assert trajectory["response_ids"] == sample["tokens"][-length:]
            assert trajectory["response_mask"] == sample["loss_mask"]
            assert trajectory["rm_scores"] == [0.0] * (length - 1) + [float32(sample["reward"])]
            assert trajectory["log_probs"] == [float32(v) for v in sample["rollout_log_probs"]]
        uids = [t["uid"] for t in trajectories]  # the GRPO grouping VERL's advantage reads
        assert uids[0] == uids[1] != uids[2] == uids[3]


def test_a_verl_recording_loads_token_for_token_in_miles_own_loader(made):
    loaded = made["miles_loaded"]
    for step, samples in zip(VERL_STEPS, loaded, strict=True):
        grouped = sorted(step, key=lambda t: ([t["uid"] for t in step].index(t["uid"]), t["session"]))
        assert len(samples) == len(grouped)
        for trajectory, sample in zip(grouped, samples, strict=True):
            assert sample["tokens"] == trajectory["prompt_ids"] + trajectory["response_ids"]
            assert sample["response_length"] == len(trajectory["response_ids"])
            assert sample["loss_mask"] == trajectory["response_mask"]
            assert sample["reward"] == float32(trajectory["reward"])
            assert sample["rollout_log_probs"] == [float32(v) for v in trajectory["log_probs"]]
        groups = [sample["group_index"] for sample in samples]
        assert groups[0] == groups[1] != groups[2] == groups[3]


def test_the_digest_is_the_same_in_both_formats_and_both_directions(made):
    tmp, digests = made["tmp"], made["digests"]
    miles_digest = recording_digest(tmp / "miles-made" / "rollouts", "miles")
    assert digests["to_verl"] == miles_digest == digests["back"] == recording_digest(tmp / "miles-again", "miles")
    assert digests["to_miles"] == recording_digest(tmp / "verl-as-miles", "miles") != miles_digest
    assert read_recording(tmp / "miles-again", "miles") == read_recording(tmp / "miles-made" / "rollouts", "miles")


def test_a_changed_token_reward_mask_or_group_changes_the_digest(made, tmp_path):
    source = made["tmp"] / "miles-made" / "rollouts"
    recording = read_recording(source, "miles")
    edited = tmp_path / "edited"
    shutil.copytree(source, edited)
    payload = torch.load(edited / "1.pt", weights_only=False)
    payload["samples"][3]["tokens"][-1] += 1
    torch.save(payload, edited / "1.pt")
    assert recording_digest(edited, "miles") != recording_digest(source, "miles")

    sample = recording.steps[0].samples[2]
    for change in (dict(reward=0.0), dict(loss_mask=(1, 1, 1)), dict(group=0), dict(rollout_log_probs=None)):
        changed = dataclasses.replace(sample, **change)
        step = dataclasses.replace(recording.steps[0], samples=(*recording.steps[0].samples[:2], changed,
                                                                *recording.steps[0].samples[3:]))  # fmt: skip
        assert digest_of(dataclasses.replace(recording, steps=(step, *recording.steps[1:]))) != digest_of(recording)


def _recording(*responses: tuple[int, ...]) -> Recording:
    """One step per response given, each of one group of two samples."""
    return Recording(
        steps=tuple(
            RecordedStep(
                samples=tuple(
                    RecordedSample(prompt_ids=(1, 2), response_ids=response, loss_mask=(1,) * len(response),
                                   reward=1.0, group=0)
                    for _ in range(2)
                )
            )
            for response in responses
        )
    )  # fmt: skip


def _edit(folder: Path, name: str, edit) -> None:
    payload = torch.load(folder / name, weights_only=False)
    edit(payload)
    torch.save(payload, folder / name)


def _garbage(folder: Path) -> None:
    (folder / "0.pt").write_bytes(b"not a pickle")


def _split_group(folder: Path) -> None:
    _edit(folder, "0.pt", lambda p: p["samples"].append({**p["samples"][0], "group_index": 0}))
    _edit(folder, "0.pt", lambda p: p["samples"][1].update(group_index=7))


BAD_MILES = {
    "a step missing": (lambda f: (f / "0.pt").unlink(), "0.pt: step: missing"),
    "lengths disagree": (
        lambda f: _edit(f, "1.pt", lambda p: p["samples"][1].update(loss_mask=[1])),
        "1.pt: samples[1].loss_mask: has 1 values for 3 response tokens",
    ),
    "response longer than the tokens": (
        lambda f: _edit(f, "1.pt", lambda p: p["samples"][0].update(response_length=9)),
        "1.pt: samples[0].response_length: is 9",
    ),
    "a dict reward": (
        lambda f: _edit(f, "0.pt", lambda p: p["samples"][0].update(reward={"acc": 1.0})),
        "0.pt: samples[0].reward: is {'acc': 1.0}, not one finite number",
    ),
    "a group split": (_split_group, "0.pt: samples[2].group_index: group 0 is split"),
    "not a dump": (_garbage, "0.pt: file: not a Miles debug rollout dump"),
}


@pytest.mark.parametrize("case", list(BAD_MILES))
def test_a_bad_recording_exits_2_naming_the_file_and_the_field(tmp_path, case):
    source = tmp_path / "rollouts"
    write_recording(_recording((3, 4), (5, 6, 7)), source, "miles")
    spoil, expected = BAD_MILES[case]
    spoil(source)
    done = _convert(sys.executable, source, "miles", tmp_path / "out", "miles")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert expected in done.stderr and str(source) in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["missing", "--from", "miles", "--to", "miles"], "missing: recording: does not exist"),
        (["rollouts", "--from", "nope", "--to", "miles"], "--from: recording format 'nope': unknown framework"),
        (["rollouts", "--from", "miles", "--to", "nope"], "--to: recording format 'nope': unknown framework"),
        (["rollouts", "--from", "miles", "--to", "miles", "--out", "taken"], "taken: output: exists already"),
    ],
)
def test_bad_options_exit_2_and_overwrite_nothing(tmp_path, argv, expected):
    write_recording(_recording((3, 4)), tmp_path / "rollouts", "miles")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    out = [] if "--out" in argv else ["--out", "new"]
    done = _run([sys.executable, RUN_PY, "convert-recording", *argv, *out], _clean_env(), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr and expected in done.stderr, done.stderr
    assert not (tmp_path / "new").exists() and (tmp_path / "taken" / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rollouts", "taken"]


def test_a_write_that_fails_half_way_leaves_nothing_behind(tmp_path, verl_python):
    write_recording(_recording((3, 4), ()), tmp_path / "rollouts", "miles")  # step 2: empty responses
    done = _convert(verl_python[0], tmp_path / "rollouts", "miles", tmp_path / "dump" / "verl", "verl")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "step 2 sample 0: empty response" in done.stderr, done.stderr
    assert list((tmp_path / "dump").iterdir()) == []


@pytest.mark.parametrize(
    "spoil, expected",
    [
        (lambda d: shutil.rmtree(d / "1"), "1: step: missing"),
        (lambda d: (d / "2" / "0" / "meta.json").unlink(), "tq_batch.pt: file: missing"),
        (lambda d: (d / "2" / "0" / "tq_batch.pt").write_bytes(b"x"), "tq_batch.pt: file: not a VERL TransferQueue"),
    ],
)
def test_a_bad_verl_dump_exits_2_naming_the_file_and_the_field(made, tmp_path, verl_python, spoil, expected):
    dump = tmp_path / "dump"
    shutil.copytree(made["replay_dir"], dump)
    spoil(dump)
    done = _convert(verl_python[0], dump, "verl", tmp_path / "out", "miles")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert expected in done.stderr and str(dump) in done.stderr and not (tmp_path / "out").exists(), done.stderr


def test_a_step_of_several_inner_batches_reads_as_one_and_they_must_agree(made, tmp_path, verl_python):
    """parameter_sync_step > 1: VERL saves each mini-batch of a step in {step}/{inner}/ and merges them on load."""
    dump = tmp_path / "dump"
    shutil.copytree(made["replay_dir"], dump)
    shutil.copytree(dump / "1" / "0", dump / "2" / "1")
    done = _convert(verl_python[0], dump, "verl", tmp_path / "merged", "miles")
    assert done.returncode == 0, done.stderr
    merged = read_recording(tmp_path / "merged", "miles").steps[1].samples
    original = read_recording(made["tmp"] / "miles-made" / "rollouts", "miles").steps
    assert merged == original[1].samples + tuple(
        dataclasses.replace(s, group=s.group + 2) for s in original[0].samples
    )

    write_recording(_recording((3, 4)), tmp_path / "no-log-probs", "miles")
    unlogged = _convert(verl_python[0], tmp_path / "no-log-probs", "miles", tmp_path / "unlogged", "verl")
    assert unlogged.returncode == 0, unlogged.stderr
    shutil.rmtree(dump / "2" / "1")
    shutil.copytree(tmp_path / "unlogged" / "1" / "0", dump / "2" / "1")
    done = _convert(verl_python[0], dump, "verl", tmp_path / "out", "miles")
    assert (
        done.returncode == 2 and "2: rollout_log_probs: in 4 of the step's 6 trajectories" in done.stderr
    ), done.stderr


def test_log_probs_on_some_samples_of_a_step_only_are_refused_for_verl(tmp_path, verl_python):
    """VERL's batch holds a field for every trajectory of the step or for none."""
    recording = _recording((3, 4))
    first = dataclasses.replace(recording.steps[0].samples[0], rollout_log_probs=(-0.5, -0.5))
    step = dataclasses.replace(recording.steps[0], samples=(first, recording.steps[0].samples[1]))
    write_recording(Recording(steps=(step,)), tmp_path / "rollouts", "miles")
    done = _convert(verl_python[0], tmp_path / "rollouts", "miles", tmp_path / "out", "verl")
    assert done.returncode == 2 and "out/1: rollout_log_probs: present on some samples" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


def test_a_framework_without_a_recording_format_is_refused_by_name(tmp_path):
    class NoRecording(ToyAdapter):
        name, label, sink_formats = "norecording", "No Recording", ()

    registry.register(NoRecording())
    try:
        with pytest.raises(UserError, match="'norecording': No Recording has no rollout dump"):
            read_recording(tmp_path, "norecording")
    finally:
        registry.unregister("norecording")


def test_without_tensordict_the_verl_format_names_the_extra_to_install(tmp_path):
    write_recording(_recording((3, 4)), tmp_path / "rollouts", "miles")
    blocker = Path(__file__).resolve().parent / "standins" / "blocker"
    env = _clean_env(PYTHONPATH=str(blocker), BENCH_TEST_BLOCK_MODULES="tensordict")
    argv = [sys.executable, RUN_PY, "convert-recording", "rollouts", "--from", "miles", "--to", "verl", "--out", "out"]
    done = _run(argv, env, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "'recording' extra (tensordict is not installed)" in done.stderr and not (tmp_path / "out").exists()
