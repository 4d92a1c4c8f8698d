"""Redaction of secrets from everything the runner writes (argv, environment records, log lines, records).

- `is_secret_name(name)`: WANDB_API_KEY, HF_TOKEN, and any name ending in _TOKEN, _KEY, _SECRET or containing
  PASSWORD (case-insensitive) is a secret; so is any name, option or override holding `secret` or `access_key` in
  any spelling (`aws_secret_access_key=`, `--aws-secret-access-key`, `+trainer.s3.secret_access_key=`).
- `Redactor.from_environ(env)` collects the values of those variables; `redact_text` replaces every occurrence of
  such a value (anywhere in a string, not only after `NAME=`) by `<redacted>`, and by name whatever follows a secret
  name in text (`WANDB_API_KEY=...`, `--wandb-key ...`, `+trainer.api_key=...`); `redact_env` replaces the values of
  secret names; `redact_argv` also redacts the word following a secret flag such as `--wandb-key` (`is_secret_option`:
  API keys, tokens, passwords; not the data-key options --input-key, --label-key, data.prompt_key); `redact_json`
  redacts every string of a document, and the whole value under a secret-named key.
- `find_plan_secrets(plan, secret_values)`: where a plan carries a secret (plans must never hold one): a
  secret-named env entry, a value after a secret flag or in a secret-named override (`+trainer.api_key=...`), or
  anywhere the value of a secret environment variable. `find_words_secrets(words)` does the same for a launch prefix.

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


_SECRET_NAME_IN_TEXT = re.compile(r"\b([A-Z][A-Z0-9_]*(?:_TOKEN|_KEY|_SECRET|PASSWORD|PASSWD)[A-Z0-9_]*)=([^\s'\"]+)")
_SECRET_FLAG_IN_TEXT = re.compile(
    r"((?<![\w.-])(?:--?|[+~]{0,2}[\w-]+\.)[\w.-]*?"
    r"(?:api[-_]?keys?|wandb[-_]key|secret[-_]key|password|passwd|(?:hf|hub|auth|access|api)[-_]token))"
    r"(=|\s+)(?!<redacted>)([^\s'\"]+)",
    re.IGNORECASE,
)


_SECRET_ANY_SPELLING = re.compile(r"secret|access[-_]?key", re.IGNORECASE)
"""A name holding `secret` or `access_key` in any spelling (AWS_SECRET_ACCESS_KEY, aws_secret_access_key,
--aws-secret-access-key, +trainer.s3.secret_access_key, secretAccessKey) is a secret, whatever else it says."""
_SECRET_WORD_IN_TEXT = re.compile(
    r"((?<![\w.-])[-+~]{0,2}[\w.-]*(?:secret|access[-_]?key)[\w.-]*)(=)(?!<redacted>)([^\s'\"]+)"
    r"|((?<![\w.-])--?[\w.-]*(?:secret|access[-_]?key)[\w.-]*)(\s+)(?!<redacted>)([^\s'\"]+)",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    return (
        name.upper() in _EXACT_SECRET_NAMES
        or bool(_SECRET_NAME.search(name))
        or bool(_SECRET_ANY_SPELLING.search(name))
    )


def is_secret_option(word: str) -> bool:
    """A command-line flag (`--wandb-key`) or a Hydra/env assignment name (`+trainer.api_key`, `HF_TOKEN`)."""
    name = word.lstrip("-+~").split(".")[-1]
    if _SECRET_ANY_SPELLING.search(name):
        return True
    if not word.startswith("-") and name.isupper():
        return is_secret_name(name)  # an environment assignment NAME=value
    return bool(_SECRET_OPTION.match(name))


def _redact_secret_word(match: re.Match[str]) -> str:
    name, sep = (match.group(1), match.group(2)) if match.group(1) else (match.group(4), match.group(5))
    return f"{name}{sep}{REDACTED}"


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
        if "=" in text or "-" in text:
            text = _SECRET_NAME_IN_TEXT.sub(lambda m: f"{m.group(1)}={REDACTED}", text)
            text = _SECRET_FLAG_IN_TEXT.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
            text = _SECRET_WORD_IN_TEXT.sub(_redact_secret_word, text)
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
            return {
                self.redact_text(str(k)): REDACTED if _is_secret_key(str(k)) and v else self.redact_json(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self.redact_json(v) for v in value]
        return value


def _is_secret_key(key: str) -> bool:
    """A document key that names a secret: an environment-style name, or a secret option (not bare token/key)."""
    if key.isupper():
        return is_secret_name(key)
    return key.lower() not in ("token", "key", "tokens", "keys") and is_secret_option(key)


def find_words_secrets(words: list[str], where: str, secret_values: Iterable[str] = ()) -> list[str]:
    """Secrets in a word list (argv, a launch prefix): a value after a secret flag or in a secret NAME=value or
    override word, or a secret variable's value anywhere; `${NAME}` references are fine."""
    problems: list[str] = []
    for index, word in enumerate(words):
        flag, eq, value = word.partition("=")
        if flag.startswith("-") and is_secret_option(flag):
            if not eq:
                value = words[index + 1] if index + 1 < len(words) else ""
        elif not (eq and is_secret_option(flag)):
            value = ""
        if value and not value.startswith("${"):
            problems.append(f"{where}: {flag}")
    for index, word in enumerate(words):
        if any(secret in word for secret in secret_values):
            problems.append(f"{where}[{index}] holds the value of a secret environment variable")
    return problems


def _strings_with_paths(value: Any, path: str) -> Iterable[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings_with_paths(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings_with_paths(item, f"{path}[{index}]")


def find_plan_secrets(plan: Mapping[str, Any], secret_values: Iterable[str] = ()) -> list[str]:
    """Where a plan carries a secret (module docstring): each entry names the field, never the value."""
    values = [v for v in secret_values if len(v) >= _MIN_SECRET_LEN]
    problems: list[str] = []
    for cell in plan.get("cells", []):
        cell_id = cell.get("id", "?")
        for name, value in (cell.get("env") or {}).items():
            if is_secret_name(name) and value and not str(value).startswith("${"):
                problems.append(f"cells[{cell_id}].env.{name}")
        for key in ("argv", "launch_argv"):
            problems += find_words_secrets([str(w) for w in cell.get(key) or []], f"cells[{cell_id}].{key}")
    for where, text in _strings_with_paths(dict(plan), ""):
        if any(secret in text for secret in values):
            problems.append(f"{where} (the value of a secret environment variable)")
    return list(dict.fromkeys(problems))
