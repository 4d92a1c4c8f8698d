"""TEST CHILD, run in the VERL check interpreter with the wheel on PYTHONPATH: VERL 0.9.1's own
`SGLangHttpServer.launch_server` (workers/rollout/sglang_rollout/async_sglang_server.py) builds the SGLang server
arguments of a planned VERL cell's rollout config, as a hybrid (colocated) or a standalone (disaggregated) server.

What is left out, and why: SGLang itself (its entrypoints load CUDA kernels at import): its modules are empty
stand-ins, and its `ServerArgs` a dataclass with the one field VERL asks about (`enable_weights_cpu_backup`) that
records the keyword arguments VERL hands it and stops the launch there (what follows starts SGLang's processes).
The server object is built without its __init__ (a Ray actor's, which reads the GPU's node address): the attributes
launch_server reads are set as __init__ sets them, the rollout config converted by VERL's own
`omega_conf_to_dataclass` from the cell's composed config. The model config is a stand-in holding what
launch_server reads of it (path, remote code, no LoRA).

argv: JSON {"root": wheel folder, "sglang_version": "0.5.12", "cells": [{"overrides": [...], "mode": "HYBRID" |
"STANDALONE"}, ...]}; prints one JSON line per cell: the keyword arguments VERL hands ServerArgs.
"""

import asyncio
import dataclasses
import importlib.abc
import importlib.machinery
import json
import sys
import types
from pathlib import Path


class _Stop(Exception):
    pass


@dataclasses.dataclass
class ServerArgs:
    enable_weights_cpu_backup: bool = False

    def __init__(self, **kwargs):
        raise _Stop(kwargs)


class _Anything:
    """Any attribute of an SGLang module VERL imports by name (request types, status enums, helpers)."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Anything()

    def __getattr__(self, name):
        return _Anything()


class _SglangModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return ServerArgs if name == "ServerArgs" else _Anything


class _SglangFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "sglang" or fullname.startswith("sglang."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _SglangModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def server_args(root: Path, overrides: list[str], mode: str) -> dict:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.rollout.replica import RolloutMode
    from verl.workers.rollout.sglang_rollout import async_sglang_server

    overrides = [o.replace("${BENCH_CELL_DIR}", "/bench-cell") for o in overrides]
    with initialize_config_dir(config_dir=str(root / "verl" / "trainer" / "config"), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    OmegaConf.resolve(cfg)
    server = object.__new__(async_sglang_server.SGLangHttpServer)
    server._disaggregation_role = "null"
    server.config = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    server.model_config = types.SimpleNamespace(
        local_path="/model", trust_remote_code=False, lora_rank=0, lora={}, hf_config=None, target_modules=None
    )
    server.rollout_mode = RolloutMode[mode]
    server.node_rank, server.nnodes, server.base_gpu_id = 0, 1, 0
    server._master_address = server._master_port = None
    server._server_address = "127.0.0.1"
    try:
        asyncio.run(server.launch_server())
    except _Stop as stop:
        return stop.args[0]
    raise RuntimeError("launch_server never built the SGLang server arguments")


def main() -> None:
    request = json.loads(sys.argv[1])
    sys.meta_path.insert(0, _SglangFinder())
    import sglang

    sglang.__version__ = request["sglang_version"]
    for cell in request["cells"]:
        print(json.dumps(server_args(Path(request["root"]), cell["overrides"], cell["mode"]), default=str))


if __name__ == "__main__":
    main()
