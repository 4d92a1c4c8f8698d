"""TEST STAND-IN for the `ray` CLI that runs a job the way Ray does: `ray job submit -- CMD...` joins CMD with
subprocess.list2cmdline into one line and runs it with /bin/sh -c (so shell characters in it are interpreted).

`start` waits until it is stopped; `status` succeeds; `job stop` does nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["start"]:
        while True:
            time.sleep(1)
    if argv[:2] == ["job", "submit"]:
        line = subprocess.list2cmdline(argv[argv.index("--") + 1 :])
        os.execv("/bin/sh", ["/bin/sh", "-c", line])
    if argv[:1] == ["status"] or argv[:2] == ["job", "stop"]:
        return
    sys.exit(f"standin ray: unsupported {argv}")


if __name__ == "__main__":
    main()
