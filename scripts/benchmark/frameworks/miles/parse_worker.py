"""Run Miles's own `miles.utils.arguments.parse_args()` on a list of train.py argvs, as train.py and train_async.py
call it (`args = parse_args()` on sys.argv), and write one verdict per argv as JSON.

Usage: parse_worker.py REQUEST.json RESULT.json, run by path (runpy, from an empty folder: parser_check.py) with
Miles (and its megatron, sglang) first on PYTHONPATH. It imports nothing of the benchmark: our own `miles` package
must never be importable beside the real one, so the repository root stays off sys.path.

Request: {"launches": [{"argv": [flag, ...], "env": {name: value}}, ...], "capability_without_gpu": [major, minor],
          "transformer_config": bool}
Result: [{"accepted": bool, "error": str | null[, "config_error": str | null]}, ...] in the order of the launches
(config_error: Megatron launches, when transformer_config is asked and parse_args accepted). `env` is what the job's
environment adds (Megatron's validation reads CUDA_DEVICE_MAX_CONNECTIONS); it is set for that parse only. An
ImportError ends the worker (exit 1): the environment cannot run the parser, which says nothing about a launch.

Left out, only where this machine lacks them (a CPU machine; on a GPU node nothing is replaced):
- triton: SGLang's own stub (sglang._triton_stub, SGLang's mechanism for platforms without triton), installed after
  torch's compiler backend has loaded, so torch keeps its true answer (no triton).
- torchvision: SGLang's utilities import it at module level for image decoding and transforms; the PyPI build does
  not load beside a CPU torch. Its modules become stub modules of the same kind, after transformers has cached its
  true answer (not installed). Calling any of them raises, so a parse that used torchvision would fail loudly.
- The GPU's compute capability: Megatron asks it (TP/CP > 1, grouped GEMM); answered with capability_without_gpu,
  the target GPU's value (H100/H200: 9.0), only when torch sees no GPU.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback


def install_stand_ins_for_absent() -> None:
    """Only for what this machine lacks: on a GPU node with triton and torchvision this changes nothing."""
    import importlib.util

    if importlib.util.find_spec("triton") is None:
        import torch._inductor.compile_fx  # noqa: F401 - torch.compile's backend, loaded while triton is truly absent
        from sglang._triton_stub import install

        install()
    if importlib.util.find_spec("torchvision") is None:
        from transformers.utils.import_utils import is_torchvision_available

        is_torchvision_available()  # cached by transformers before the placeholder exists: it keeps its answer (no)
        sys.meta_path.insert(0, TorchvisionPlaceholder())


class TorchvisionPlaceholder:
    """torchvision and its submodules as SGLang's triton stub modules: importable, never called while parsing."""

    def find_spec(self, name, path=None, target=None):
        if name != "torchvision" and not name.startswith("torchvision."):
            return None
        from sglang._triton_stub import _MockModule

        class Uncallable(_MockModule):
            def __getattr__(self, attr):
                if attr.startswith("__") or attr[:1].isupper():
                    return super().__getattr__(attr)  # dunders: AttributeError; classes: SGLang's stub base
                child = Uncallable(f"{self.__name__}.{attr}")
                setattr(self, attr, child)
                return child

            def __call__(self, *args, **kwargs):
                raise RuntimeError(f"{self.__name__} is a placeholder on this machine: it cannot be called")

        module = Uncallable(name)
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], child, module)
        return module.__spec__


def answer_device_capability(capability: tuple[int, int]) -> None:
    """Where no GPU can be asked, both ways Megatron asks: get_device_capability(), get_device_properties().major."""
    import types

    import torch

    if torch.cuda.is_available():
        return
    major, minor = capability
    torch.cuda.get_device_capability = lambda device=None: (major, minor)
    torch.cuda.get_device_properties = lambda device=None: types.SimpleNamespace(major=major, minor=minor)


class StderrCapture(io.StringIO):
    """stderr captured for argparse's message, with the real descriptor for code that asks for one: Megatron's
    inference coordinator, imported while parsing where zmq and msgpack are installed, calls faulthandler.enable()."""

    def fileno(self) -> int:
        return sys.__stderr__.fileno()


def failure(exc: BaseException, stderr: io.StringIO) -> str:
    """The parser's own message: argparse's error line (exit 2), or the validator's exception and where it rose."""
    if isinstance(exc, SystemExit):
        lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
        return lines[-1] if lines else f"exit {exc.code}"
    where = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__}: {exc} ({os.path.basename(where.filename)}:{where.lineno})"


def verdict(parse_args, launch: dict, transformer_config: bool) -> dict:
    """parse_args() on the launch; then, for Megatron and when asked, the TransformerConfig Miles's model provider
    builds from those args (Megatron checks heads/groups/experts against TP/EP there, not in validate_args)."""
    saved, sys.argv = sys.argv, ["train.py", *launch["argv"]]
    env = launch.get("env") or {}
    saved_env = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    stderr = StderrCapture()
    result = {"accepted": False, "error": None}
    try:
        with contextlib.redirect_stderr(stderr):
            args = parse_args()
        result["accepted"] = True
        if transformer_config and args.train_backend == "megatron":
            from megatron.training.arguments import core_transformer_config_from_args

            result["config_error"] = None
            core_transformer_config_from_args(args)
    except ImportError:
        raise  # this environment cannot run the parser: not a verdict on the launch
    except (SystemExit, Exception) as exc:  # noqa: BLE001 - every validator failure is a verdict, not a crash
        result["config_error" if result["accepted"] else "error"] = failure(exc, stderr)
    finally:
        sys.argv = saved
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return result


def main(request_path: str, result_path: str) -> None:
    with open(request_path) as handle:
        request = json.load(handle)
    install_stand_ins_for_absent()
    answer_device_capability(tuple(request["capability_without_gpu"]))
    from miles.utils.arguments import parse_args

    verdicts = [
        verdict(parse_args, launch, request.get("transformer_config", False)) for launch in request["launches"]
    ]
    with open(result_path, "w") as handle:
        json.dump(verdicts, handle)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
