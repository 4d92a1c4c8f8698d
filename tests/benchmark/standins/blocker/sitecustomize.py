"""TEST HELPER: on PYTHONPATH, makes the top-level modules named in $BENCH_TEST_BLOCK_MODULES (comma-separated)
unimportable, as on a machine where their extra was never installed."""

import os
import sys
from importlib.abc import MetaPathFinder

_BLOCKED = {name for name in os.environ.get("BENCH_TEST_BLOCK_MODULES", "").split(",") if name}


class _Blocked(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


if _BLOCKED:
    sys.meta_path.insert(0, _Blocked())
