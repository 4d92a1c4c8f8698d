# doc-dev: docs/benchmark.md
"""Redaction of secrets from everything the runner writes (argv, environment records, log lines, records).

- `is_secret_name(name)`: WANDB_API_KEY, HF_TOKEN, and any name ending in _TOKEN, _KEY, _SECRET or containing
  PASSWORD (case-insensitive) is a secret.
- `Redactor.from_environ(env)` collects the values of those variables; `redact_text` replaces every occurrence of
  such a value (anywhere in a string, not only after `NAME=`) by `<redacted>`; `redact_env` replaces the values of
  secret names; `redact_argv` also redacts the word following a secret flag such as `--wandb-key` (`is_secret_option`:
  API keys, tokens, passwords; not the data-key options --input-key, --label-key, data.prompt_key).
- `find_plan_secrets(plan)`: literal secret values a plan would carry (plans must never hold one).

Caveats:
- Only values of at least 4 characters are searched for in text: shorter ones would redact unrelated text.
- A secret the harness never sees (one that exists only inside a container) cannot be redacted by it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

REDACTED = "<redacted>"
_MIN_SECRET_LEN = 4
_EXACT_SECRET_NAMES = frozenset({"WANDB_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"})
_SECRET_NAME = re.compile(r"(_TOKEN|_KEY|_SECRET)$|PASSWORD|PASSWD", re.IGNORECASE)
_SECRET_OPTION = re.compile(
    r"^(?:[\w-]*[-_])?(?:api[-_]?keys?|wandb[-_]key|secret(?:[-_]key)?|password|passwd|(?:hf|hub|auth|access|api)[-_]token)$"
    r"|^(?:token|key)$",
    re.IGNORECASE,
)
"""Secret-bearing option names (--wandb-key, --sglang-api-key, --hf-token, trainer.api_key); data-key options such as
Miles's --input-key/--label-key/--reward-key, VERL's data.prompt_key or --fim-eod-token are not secrets."""


def is_secret_name(name: str) -> bool:
    return name.upper() in _EXACT_SECRET_NAMES or bool(_SECRET_NAME.search(name))


def is_secret_option(word: str) -> bool:
    """A command-line flag (`--wandb-key`) or a Hydra/env assignment name (`+trainer.api_key`, `HF_TOKEN`)."""
    name = word.lstrip("-+").split(".")[-1]
    if not word.startswith("-") and name.isupper():
        return is_secret_name(name)  # an environment assignment NAME=value
    return bool(_SECRET_OPTION.match(name))


@dataclass(frozen=True)
class Redactor:
    """Replaces known secret values wherever they appear; longer values first so overlapping secrets vanish whole."""

    values: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def from_environ(cls, *envs: Mapping[str, str]) -> Redactor:
        found = {
            value
            for env in envs
            for name, value in env.items()
            if is_secret_name(name) and len(value) >= _MIN_SECRET_LEN
        }
        return cls(values=tuple(sorted(found, key=len, reverse=True)))

    def redact_text(self, text: str) -> str:
        for value in self.values:
            if value in text:
                text = text.replace(value, REDACTED)
        return text

    def redact_env(self, env: Mapping[str, str]) -> dict[str, str]:
        return {name: (REDACTED if is_secret_name(name) else self.redact_text(value)) for name, value in env.items()}

    def redact_argv(self, argv: Iterable[str]) -> list[str]:
        out: list[str] = []
        hide_next = False
        for word in argv:
            if hide_next:
                out.append(REDACTED)
                hide_next = False
                continue
            flag, eq, _ = word.partition("=")
            if flag.startswith("-") and is_secret_option(flag):
                if eq:
                    out.append(f"{flag}={REDACTED}")
                    continue
                hide_next = True
            elif eq and is_secret_option(flag):
                out.append(f"{flag}={REDACTED}")  # NAME=value words (env assignments, Hydra overrides)
                continue
            out.append(self.redact_text(word))
        return out

    def redact_json(self, value: Any) -> Any:
        """Redact every string inside a JSON-like value (dict keys included)."""
        if isinstance(value, str):
            return self.redact_text(value)
        if isinstance(value, dict):
            return {self.redact_text(str(k)): self.redact_json(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.redact_json(v) for v in value]
        return value


def find_plan_secrets(plan: Mapping[str, Any]) -> list[str]:
    """Where a plan carries a literal secret: env entries with secret names, and values of secret-looking flags."""
    problems: list[str] = []
    for cell in plan.get("cells", []):
        cell_id = cell.get("id", "?")
        for name, value in (cell.get("env") or {}).items():
            if is_secret_name(name) and value and not str(value).startswith("${"):
                problems.append(f"cells[{cell_id}].env.{name}")
        for key in ("argv", "launch_argv"):
            words = list(cell.get(key) or [])
            for index, word in enumerate(words):
                flag, eq, value = word.partition("=")
                if not (flag.startswith("-") and is_secret_option(flag)):
                    continue
                if not eq:
                    value = words[index + 1] if index + 1 < len(words) else ""
                if value and not value.startswith("${"):
                    problems.append(f"cells[{cell_id}].{key}: {flag}")
    return problems
