"""Where a model's architecture facts and the preset files come from, for every stage (plan, metrics, runner,
calibration).

- `MODEL_CONFIGS_DIR` holds HF config.json subsets of the preset models; `PRESETS_DIR` holds the preset YAMLs,
  read by `read_preset_yaml(name)` alone (spec.load_preset validates what it returns); `BACKENDS` the training
  backends, in the order the matrix and the calibration take them.
- `resolve_model_config(model)`: a dict, a config.json path (or its folder), a name in model_configs/, or a preset
  name (its `model.config`) -> the HF config dict. ValueError names what was tried.

Caveats:
- Standard library and PyYAML only, no pydantic: calibrate.py imports this on bare GPU images that lack pydantic.
  A preset is read here without spec validation; spec.load_preset is the validated reading.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

BACKENDS: tuple[str, ...] = ("fsdp", "megatron")
BENCHMARK_DIR = Path(__file__).resolve().parent
PRESETS_DIR = BENCHMARK_DIR / "presets"
MODEL_CONFIGS_DIR = BENCHMARK_DIR / "model_configs"


def model_config_names() -> list[str]:
    return sorted(p.stem for p in MODEL_CONFIGS_DIR.glob("*.json"))


def preset_names(presets_dir: Path | None = None) -> list[str]:
    return sorted(p.stem for p in (presets_dir or PRESETS_DIR).glob("*.yaml"))


def _unique_key_loader() -> type:
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last one silently: a second
    `run:` section would drop the first and leave a misleading "Field required")."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first at line {seen[key] + 1})", key_node.start_mark
                    )
                seen[key] = key_node.start_mark.line
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """A YAML file that must hold a mapping (a spec or a preset); ValueError names the file and a duplicate key."""
    import yaml

    try:
        raw = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=_unique_key_loader())
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not a text (UTF-8) file: {exc.reason} at byte {exc.start}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ValueError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from exc
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: a spec file must hold a mapping, got {type(raw).__name__}")
    return raw


def read_preset_yaml(name: str, presets_dir: Path | None = None) -> dict[str, Any]:
    """The raw mapping of `presets/<name>.yaml` (unvalidated: spec.load_preset is the validated reading)."""
    path = (presets_dir or PRESETS_DIR) / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"no preset named {name!r} (known: {preset_names(presets_dir)})")
    return read_yaml_mapping(path)


def named_model_config(name: str) -> dict[str, Any]:
    path = MODEL_CONFIGS_DIR / f"{name}.json"
    if not path.is_file():
        raise ValueError(f"no model config named {name!r} (known: {model_config_names()})")
    return json.loads(path.read_text(encoding="utf-8"))


def resolve_model_config(model: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """The HF config dict behind a model reference (see the module docstring)."""
    if isinstance(model, Mapping):
        return dict(model)
    path = Path(model)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    if (MODEL_CONFIGS_DIR / f"{model}.json").is_file():
        return named_model_config(str(model))
    if str(model) in preset_names():
        config = (read_preset_yaml(str(model)).get("model") or {}).get("config")
        if isinstance(config, Mapping):
            return dict(config)
        if isinstance(config, str):
            return named_model_config(config)
        raise ValueError(f"preset {model}.yaml: model.config must name a model config or hold an HF config dict")
    raise ValueError(
        f"{str(model)!r} is neither a config.json path, a model config ({model_config_names()}) nor a preset "
        f"({preset_names()})"
    )
