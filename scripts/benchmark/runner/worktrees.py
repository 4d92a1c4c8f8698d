"""The commits a bisect walks and the checkouts it runs them from: one repository's git worktrees, made and removed.

- `commit_range(repo, good, bad)`: the commits of `good..bad` on bad's first-parent line, good first, each with its
  subject: a merged pull request is one commit of that line (its merge), the unit a maintainer reverts. ValueError
  (one sentence naming the option) when the folder is not a git repository, a commit is unknown, good is not on
  bad's first-parent line, or nothing lies between them.
- `Worktrees(repo, folder)`: `add(sha)` makes a detached worktree of the commit at `folder/<sha12>` (reused while it
  exists), `remove(sha)` takes it away again with its registration; used as a context manager, every worktree it made
  is removed on every way out (an error, Ctrl-C, a SIGTERM the command turns into an exception). `clear_stale()`
  removes the worktrees a killed command left in `folder`, before anything else runs there.

Caveats:
- A worktree shares the repository's object store: the repository must stay where it is while a bisect runs.
- SIGKILL leaves the worktrees in place; the next command in the same folder clears them (`clear_stale`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

SHORT = 12
_CHECKOUT_NAME = re.compile(rf"[0-9a-f]{{{SHORT}}}")


@dataclass(frozen=True, kw_only=True)
class Commit:
    sha: str
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:SHORT]


class GitError(ValueError):
    """A git command failed: its first line of stderr, with the command."""


def git(repo: Path, *args: str, timeout_s: float = 120.0) -> str:
    result = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if result.returncode != 0:
        first = (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[0]
        raise GitError(f"git {' '.join(args[:2])}: {first}")
    return result.stdout


def resolve(repo: Path, rev: str, option: str) -> str:
    """The full sha of a commit named by `rev`; ValueError naming `option` when there is none."""
    if not rev or rev.startswith("-"):
        raise ValueError(f"{option}: {rev!r} is not a commit")
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    except GitError:
        raise ValueError(f"{option}: no commit {rev!r} in {repo}") from None


def commit_range(repo: Path, good: str, bad: str) -> list[Commit]:
    """good, then every commit after it up to bad on bad's first-parent line (module docstring)."""
    repo = Path(repo)
    try:
        top = Path(git(repo, "rev-parse", "--show-toplevel").strip())
    except (GitError, FileNotFoundError, NotADirectoryError):
        raise ValueError(f"--repo {repo}: not a git repository") from None
    good_sha, bad_sha = resolve(top, good, "--good"), resolve(top, bad, "--bad")
    if good_sha == bad_sha:
        raise ValueError(f"--good and --bad are the same commit {good_sha[:SHORT]}: nothing to bisect")
    if _is_ancestor(top, bad_sha, good_sha):
        raise ValueError(f"--bad {bad_sha[:SHORT]} comes before --good {good_sha[:SHORT]}: swap them")
    lines = git(top, "log", "--first-parent", "--reverse", "--format=%H%x00%s", f"{good_sha}..{bad_sha}")
    after = [Commit(sha=sha, subject=subject) for sha, _, subject in (x.partition("\0") for x in lines.splitlines())]
    if not after or git(top, "rev-parse", f"{after[0].sha}^1").strip() != good_sha:
        raise ValueError(
            f"--good {good_sha[:SHORT]} is not on the first-parent line of --bad {bad_sha[:SHORT]} "
            f"(git log --first-parent {bad_sha[:SHORT]}): give a good commit that --bad descends from on its main line"
        )
    subject = git(top, "log", "-1", "--format=%s", good_sha).strip()
    return [Commit(sha=good_sha, subject=subject), *after]


def _is_ancestor(repo: Path, older: str, newer: str) -> bool:
    result = subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", older, newer], capture_output=True,
                            timeout=120, check=False)  # fmt: skip
    return result.returncode == 0


class Worktrees:
    """Detached worktrees of one repository in one folder, each removed again (module docstring)."""

    def __init__(self, repo: Path, folder: Path):
        self.repo = Path(repo)
        self.folder = Path(folder)
        self.made: dict[str, Path] = {}

    def path(self, sha: str) -> Path:
        return self.folder / sha[:SHORT]

    def add(self, sha: str) -> Path:
        path = self.path(sha)
        if sha in self.made and path.is_dir():
            return path
        self.folder.mkdir(parents=True, exist_ok=True)
        git(self.repo, "worktree", "add", "--detach", "--force", str(path), sha)
        self.made[sha] = path
        return path

    def remove(self, sha: str) -> None:
        path = self.made.pop(sha, None)
        if path is not None:
            _remove_worktree(self.repo, path)

    def remove_all(self) -> None:
        for sha in list(self.made):
            self.remove(sha)

    def clear_stale(self) -> list[Path]:
        """Worktrees of this repository in `folder` that no live command made (a killed one's): removed."""
        if not self.folder.is_dir():
            return []
        stale = [
            p
            for p in sorted(self.folder.iterdir())
            if _CHECKOUT_NAME.fullmatch(p.name) and p not in self.made.values()
        ]
        for path in stale:
            _remove_worktree(self.repo, path)
        return stale

    def __enter__(self) -> Worktrees:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove_all()


def _remove_worktree(repo: Path, path: Path) -> None:
    """Remove the worktree at `path` and its registration; a folder git no longer knows is deleted as well (it can
    only be a checkout this folder's command made), and stale registrations are pruned."""
    try:
        git(repo, "worktree", "remove", "--force", "--force", str(path))
    except GitError:
        shutil.rmtree(path, ignore_errors=True)
    git(repo, "worktree", "prune")
