"""Test helper: a folder nobody can write to, root included (root ignores permission bits)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path


def lock_read_only(folder: Path) -> Callable[[], None] | None:
    """Make `folder` read-only to everyone, root included; returns how to undo it, or None when no way works here."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return lambda: folder.chmod(0o755)
    if shutil.which("chattr") and subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0:
        return lambda: subprocess.run(["chattr", "-i", str(folder)], check=True)
    if subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], capture_output=True
    ).returncode:
        return None
    return lambda: subprocess.run(["umount", str(folder)], check=True)
