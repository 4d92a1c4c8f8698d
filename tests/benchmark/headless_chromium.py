"""Test helper: Debian's Chromium, headless, as the tests drive it (rendering a page, measuring it, a screenshot).

- `chromium_binary()`: `chromium` on PATH (else `chromium-browser`, `google-chrome`); None when not installed
  (`.ci/run` installs Debian's `chromium`).
- `dump_dom(page, width, height)`: the DOM after the page's load handlers ran, at that window size.
- `screenshot(page, out, width, height)`: a PNG of the top `height` pixels of the page.

Caveats:
- Runs as root with --no-sandbox and with background networking off (the machine has no outside network); each
  call gets a fresh --user-data-dir. A Chromium that outlives `TIMEOUT_S` is stopped by its own process group.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

TIMEOUT_S = 90
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
]


def chromium_binary() -> str | None:
    """Debian's `chromium`; on other runners the same engine under its other names."""
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _run(args: list[str]) -> str:
    binary = chromium_binary()
    if binary is None:
        raise RuntimeError("chromium is not installed (Debian: apt-get install chromium; .ci/run installs it)")
    with tempfile.TemporaryDirectory(prefix="bench-chromium-") as profile:
        proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            out, err = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the group this call started, renderer processes included
            proc.communicate()
            raise
    if proc.returncode != 0:
        raise RuntimeError(f"chromium exited with {proc.returncode}: {err[-2000:]}")
    return out


def dump_dom(page: Path, *, width: int, height: int) -> str:
    return _run([f"--window-size={width},{height}", "--dump-dom", page.resolve().as_uri()])


def screenshot(page: Path, out: Path, *, width: int, height: int) -> Path:
    _run([f"--window-size={width},{height}", f"--screenshot={out.resolve()}", page.resolve().as_uri()])
    if not out.is_file():
        raise RuntimeError(f"chromium wrote no screenshot to {out}")
    return out
