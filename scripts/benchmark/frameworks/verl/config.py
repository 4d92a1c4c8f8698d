"""Compose a VERL cell's overrides against VERL 0.9.1's real Hydra config, in strict (struct) mode.

- `find_verl_root() -> Path | None`: env VERL_ISOLATED_DIR (when set, the only candidate), else
  <repo>/.cache/verl-0.9.1, else the installed verl package's folder found without importing it. The root holds
  verl/trainer/config/ppo_trainer.yaml.
- `compose_overrides(overrides, root)`: hydra initialize_config_dir + compose("ppo_trainer"), the way main_ppo builds
  its config; an unknown key raises ConfigCompositionException. `hydra.*` overrides (Hydra's own settings) are
  dropped, and ${BENCH_CELL_DIR} becomes a placeholder folder.
- `verl_override_problems(overrides, root) -> list[str]`: composition errors, plus mandatory values left missing.

Caveats:
- Hydra does not type-check at compose time: a wrong type composes; VERL's validate_config catches it
  on the GPU node. Never import `verl`: the wheel's top-level `scripts`/`tests` packages shadow ours.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from scripts.benchmark.frameworks.launch import BENCH_CELL_DIR

REPO_ROOT = Path(__file__).resolve().parents[4]
CONFIG_SUBDIR = Path("verl") / "trainer" / "config"


def _has_config(root: Path) -> bool:
    return (root / CONFIG_SUBDIR / "ppo_trainer.yaml").is_file()


def find_verl_root() -> Path | None:
    """An explicit VERL_ISOLATED_DIR is the only candidate when set (a wrong one means "not found", not a fallback)."""
    if os.environ.get("VERL_ISOLATED_DIR"):
        root = Path(os.environ["VERL_ISOLATED_DIR"])
        return root if _has_config(root) else None
    candidates = [REPO_ROOT / ".cache" / "verl-0.9.1"]
    try:
        found = importlib.util.find_spec("verl")
    except (ImportError, ValueError):
        found = None
    if found is not None and found.submodule_search_locations:
        candidates.append(Path(list(found.submodule_search_locations)[0]).parent)
    return next((root for root in candidates if _has_config(root)), None)


def compose_overrides(overrides: list[str], root: Path):
    from hydra import compose, initialize_config_dir

    cleaned = [o.replace(BENCH_CELL_DIR, "/bench-cell") for o in overrides if not o.lstrip("+~").startswith("hydra.")]
    with initialize_config_dir(config_dir=str(root / CONFIG_SUBDIR), version_base=None):
        return compose(config_name="ppo_trainer", overrides=cleaned)


def verl_override_problems(overrides: list[str], root: Path) -> list[str]:
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        cfg = compose_overrides(overrides, root)
    except (HydraException, OmegaConfBaseException) as exc:
        cause = f" ({exc.__cause__})" if exc.__cause__ else ""
        return [f"{type(exc).__name__}: {exc}{cause}"]
    if not OmegaConf.is_struct(cfg):
        return ["composed VERL config is not in struct mode"]
    if OmegaConf.is_missing(cfg.actor_rollout_ref.rollout, "name"):
        return ["actor_rollout_ref.rollout.name is left missing (???)"]
    return []
