"""Child process: a real Miles's own `parse_args()` on each launch, then the entry script's own checks before Ray.

Usage: miles_entry_worker.py REQUEST.json RESULT.json, run by path from an empty folder with Miles (and its megatron,
sglang) first on PYTHONPATH. It imports nothing of the benchmark, so the real `miles` is the only one importable.

Request: {"launches": [{"argv": [flag, ...], "env": {name: value}, "entry": "train.py" | "train_async.py" | null}],
          "miles_root": folder holding the entry scripts (null: parse only),
          "capability_without_gpu": [major, minor], "stand_ins": ["ring_flash_attn", ...],
          "absent_stand_ins": path of parse_worker.py or null}
Result, per launch in order: {"accepted": bool, "stage": "parse" | "entry" | null, "error": str | null}
- stage "parse": `miles.utils.arguments.parse_args()` refused (argparse's error line, or the validator's exception).
- stage "entry": parse_args accepted; the entry script's own `train(args)` refused before its first Ray call
  (train.py: not --fully-async; train_async.py: not --colocate, `validate_async_off_policy_correction`). The entry
  script is Miles's file, loaded as it is; its `train()` runs until `configure_logger`, the first call after those
  checks, which this worker answers by stopping (nothing of Ray, SGLang or the GPUs is started).

Stand-ins, and nothing else:
- The GPU's compute capability, asked by Megatron (TP/CP > 1, grouped GEMM): answered with capability_without_gpu,
  only when torch sees no GPU.
- "ring_flash_attn", only when named in the request and it cannot be imported (absent; or, as in Miles's CPU-CI
  environment, installed without the flash_attn it imports): an importable module whose every attribute raises
  when called. miles-rl 0.0.2 imports it at module level on the FSDP parse path
  (miles.backends.experimental.fsdp_utils) and never calls it while parsing.
- "absent_stand_ins": the release's parse on a CPU machine (torch 2.13 CPU, no torchvision build that loads beside it,
  no triton): parse_worker.py's `install_stand_ins_for_absent`, the same stand-ins test_miles_parser.py's parse uses,
  loaded from that file by path. The Miles overlay asks for none: its environment has real triton and torchvision.
An ImportError of anything else ends the worker (exit 1): the environment cannot run the parser.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import sys
import traceback
import types


class StopBeforeRay(Exception):
    """Raised where the entry script's `train()` would first start logging and Ray: its own checks passed."""


class Captured(io.StringIO):
    """stderr captured for argparse's message, with the real descriptor for code that asks (faulthandler)."""

    def fileno(self) -> int:
        return sys.__stderr__.fileno()


def answer_device_capability(capability) -> None:
    import torch

    if torch.cuda.is_available():
        return
    major, minor = capability
    torch.cuda.get_device_capability = lambda device=None: (major, minor)
    torch.cuda.get_device_properties = lambda device=None: types.SimpleNamespace(major=major, minor=minor)


def install_stand_in(name: str) -> None:
    import importlib

    try:
        importlib.import_module(name)
        return  # the real module imports: nothing is stood in for
    except ImportError:
        sys.modules.pop(name, None)

    class NeverCalled(types.ModuleType):
        def __getattr__(self, attr):
            if attr.startswith("__"):
                raise AttributeError(attr)

            def never(*args, **kwargs):
                raise RuntimeError(f"{name}.{attr} is an import stand-in: it cannot be called")

            return never

    sys.modules[name] = NeverCalled(name)


def failure(exc: BaseException, stderr: io.StringIO) -> str:
    if isinstance(exc, SystemExit):
        lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
        return lines[-1] if lines else f"exit {exc.code}"
    where = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__}: {exc} ({os.path.basename(where.filename)}:{where.lineno})"


def entry_train(miles_root: str, entry: str):
    """The entry script's own `train` coroutine function, its first post-check call replaced by a stop."""
    import runpy

    namespace = runpy.run_path(os.path.join(miles_root, entry), run_name="miles_entry_script")
    train = namespace["train"]

    def stop(*args, **kwargs):
        raise StopBeforeRay

    train.__globals__["configure_logger"] = stop
    return train


def verdict(parse_args, launch: dict, miles_root: str | None, trains: dict) -> dict:
    saved_argv, sys.argv = sys.argv, [launch.get("entry") or "train.py", *launch["argv"]]
    env = launch.get("env") or {}
    saved_env = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    stderr = Captured()
    result = {"accepted": False, "stage": "parse", "error": None}
    try:
        with contextlib.redirect_stderr(stderr):
            args = parse_args()
        entry = launch.get("entry")
        if miles_root and entry:
            result["stage"] = "entry"
            if entry not in trains:
                trains[entry] = entry_train(miles_root, entry)
            try:
                asyncio.run(trains[entry](args))
            except StopBeforeRay:
                pass
            else:
                raise RuntimeError(f"{entry}: train() returned without reaching configure_logger")
        result.update(accepted=True, stage=None)
        if launch.get("report_args"):
            result["args"] = {name: getattr(args, name, "<absent>") for name in launch["report_args"]}
    except ImportError:
        raise
    except (SystemExit, Exception) as exc:  # noqa: BLE001 - every refusal is a verdict
        result["error"] = failure(exc, stderr)
    finally:
        sys.argv = saved_argv
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return result


def main(request_path: str, result_path: str) -> None:
    with open(request_path) as handle:
        request = json.load(handle)
    if request.get("absent_stand_ins"):
        import runpy

        runpy.run_path(request["absent_stand_ins"])["install_stand_ins_for_absent"]()
    for name in request.get("stand_ins", []):
        install_stand_in(name)
    answer_device_capability(request["capability_without_gpu"])
    from miles.utils.arguments import parse_args

    trains: dict = {}
    verdicts = [verdict(parse_args, launch, request.get("miles_root"), trains) for launch in request["launches"]]
    with open(result_path, "w") as handle:
        json.dump(verdicts, handle)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
