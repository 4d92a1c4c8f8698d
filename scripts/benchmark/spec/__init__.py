"""The pinned benchmark spec, the bottom of the pipeline: every stage reads it, it imports no stage.

`benchmark.py` (BenchmarkSpec, validation, hash, presets), `sections.py` (one model per concern), `pins.py` (what
both frameworks must run alike beyond hyperparameters), `learning.py` and `report.py` (how results are judged; not
in the hash). Beside the package, `model_config.py` holds the architecture facts and preset files (standard library
only, so the bare-GPU calibration imports it without pydantic).
"""

from scripts.benchmark.model_config import (
    BACKENDS,
    MODEL_CONFIGS_DIR,
    PRESETS_DIR,
    model_config_names,
    named_model_config,
    preset_names,
    read_preset_yaml,
    read_yaml_mapping,
    resolve_model_config,
)
from scripts.benchmark.spec.benchmark import (
    BenchmarkSpec,
    full_loop_spec_hash,
    load_preset,
    load_spec_file,
    spec_hash,
    spec_json,
    spec_json_hash,
    steady_state_warnings,
    with_overrides,
)
from scripts.benchmark.spec.sections import KNOWN_ARCHITECTURES, LAYOUTS, LEARNING_RUN_STEPS, Backend, Layout

__all__ = [
    "BACKENDS",
    "KNOWN_ARCHITECTURES",
    "LAYOUTS",
    "LEARNING_RUN_STEPS",
    "MODEL_CONFIGS_DIR",
    "PRESETS_DIR",
    "Backend",
    "BenchmarkSpec",
    "Layout",
    "full_loop_spec_hash",
    "load_preset",
    "load_spec_file",
    "model_config_names",
    "named_model_config",
    "preset_names",
    "read_preset_yaml",
    "read_yaml_mapping",
    "resolve_model_config",
    "spec_hash",
    "spec_json_hash",
    "spec_json",
    "steady_state_warnings",
    "with_overrides",
]
