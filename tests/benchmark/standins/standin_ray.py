"""TEST STAND-IN for the `ray` CLI, not Ray: just enough of `ray start --head --block` and `ray job submit/stop`.

- `start --head --block --port=P --dashboard-port=D --dashboard-agent-listen-port=A ...`: listens on P, D and A,
  starts one child (like a raylet), and
  blocks until signalled; appends its argv, pids and environment variable names (never values) to
  $STANDIN_RAY_RECORD.
- `job submit [options] -- CMD...`: appends its argv and RAY_ADDRESS to $STANDIN_RAY_RECORD, then execs CMD.
- `job stop ...`: appends its argv.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time


def _record(entry: dict) -> None:
    path = os.environ.get("STANDIN_RAY_RECORD")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")


def _option(argv: list[str], name: str) -> str | None:
    return next((w.split("=", 1)[1] for w in argv if w.startswith(name + "=")), None)


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["start"]:
        listeners = []
        for name in ("--port", "--dashboard-port", "--dashboard-agent-listen-port"):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", int(_option(argv, name))))
            s.listen()
            listeners.append(s)
        child = os.fork()
        if child == 0:
            while True:
                time.sleep(1)
        _record({"cmd": "start", "argv": argv, "pid": os.getpid(), "child": child, "env_names": sorted(os.environ)})
        while True:
            time.sleep(1)
    if argv[:2] == ["job", "submit"]:
        _record({"cmd": "submit", "argv": argv, "RAY_ADDRESS": os.environ.get("RAY_ADDRESS")})
        command = argv[argv.index("--") + 1 :]
        os.execvp(command[0], command)
    if argv[:2] == ["job", "stop"]:
        _record({"cmd": "stop", "argv": argv})
        return
    sys.exit(f"standin ray: unsupported {argv}")


if __name__ == "__main__":
    main()
