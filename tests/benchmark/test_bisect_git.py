"""`run.py bisect`'s git plumbing on a real repository (runner/worktrees.py): the Miles snapshot in a git repository
with synthetic commits on top (tests/benchmark/bisect_repo.py). The range is bad's first-parent line from good; a
worktree of a commit holds that commit's files and is removed with its registration; wrong ranges are refused."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tests.benchmark.bisect_repo import SLOW_S, SLOWDOWN_AT, git, snapshot_repo, worktree_paths


@pytest.fixture(scope="module")
def miles_repo(tmp_path_factory) -> tuple[Path, list[str]]:
    return snapshot_repo(tmp_path_factory.mktemp("git"))


def test_the_range_is_the_first_parent_line_from_good_to_bad(miles_repo, tmp_path):
    from scripts.benchmark.runner.worktrees import Worktrees, commit_range

    repo, shas = miles_repo
    commits = commit_range(repo, shas[0][:8], shas[-1])
    assert [c.sha for c in commits] == shas
    assert [c.subject for c in commits[:2]] == ["stand-in trainer (the good end)", "synthetic change 1"]
    with Worktrees(repo, tmp_path / "checkouts") as trees:
        path = trees.add(shas[SLOWDOWN_AT])
        assert (path / "bench_step_s.txt").read_text().strip() == str(SLOW_S)
        assert (path / "train.py").is_file() and (path / "miles" / "__init__.py").is_file()
        assert str(path) in worktree_paths(repo)
    assert not path.exists() and worktree_paths(repo) == [str(repo)]
    for good, bad, message in (
        (shas[3], shas[1], "comes before --good"),
        (shas[2], shas[2], "same commit"),
        ("no-such-commit", shas[1], "--good: no commit 'no-such-commit'"),
    ):
        with pytest.raises(ValueError, match=message):
            commit_range(repo, good, bad)
    with pytest.raises(ValueError, match="not a git repository"):
        commit_range(tmp_path, shas[0], shas[1])


def test_a_merged_side_branch_is_one_commit_of_the_range(miles_repo, tmp_path):
    """A merge on bad's main line counts once (its merge commit); a good commit on the side branch is refused."""
    from scripts.benchmark.runner.worktrees import commit_range

    repo, shas = miles_repo
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    git(clone, "checkout", "-q", "-b", "side", shas[1])
    (clone / "side.txt").write_text("side\n")
    git(clone, "add", "side.txt")
    git(clone, "commit", "-qm", "side work")
    side = git(clone, "rev-parse", "HEAD").strip()
    git(clone, "checkout", "-q", "-B", "main", shas[-1])
    git(clone, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    merge = git(clone, "rev-parse", "HEAD").strip()
    assert [c.sha for c in commit_range(clone, shas[0], merge)] == [*shas, merge]
    with pytest.raises(ValueError, match="first-parent line"):
        commit_range(clone, side, merge)
