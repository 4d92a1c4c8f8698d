"""Redaction of secrets from everything the harness writes or prints (argv, environment records, log lines, records).

A secret is recognised by its name and by its value's shape:
- `is_secret_name(name)` (environment variables): a name whose words hold token, pat, auth, credential(s),
  password, passwd, passphrase, secret, api key, private key, or that ends in _KEY (WANDB_API_KEY, HF_TOKEN,
  GITHUB_PAT, GH_AUTH, HF_HUB_CREDENTIAL, DB_PASSWORD), unless its last word says it is a setting about one (a mode,
  a path, a file, a URL: RAY_AUTH_MODE, HF_TOKEN_PATH); `access_key` in any spelling always is one.
- `is_secret_option(word)` (flags, Hydra overrides): the same words, but only as what the option holds, its last
  words (`--github-token`, `--bearer-token`, `--private-key`, `+trainer.api_key`); not a tokenizer's tokens
  (`--fim-eod-token`, `--rollout-stop-token-ids`) nor the data keys (--input-key, data.prompt_key). A flag that
  merely contains `secret` (`--secret-name`) is judged by its value's shape, not by its name.
- `token_shapes(text)`: known token shapes wherever they appear (GitHub classic and fine-grained, Hugging Face, AWS
  access key ids, Slack, OpenAI-style `sk-`, JWTs) and a password in a URL's user info (`postgresql://u:pw@h/db`).
- `Redactor.from_environ(env)` collects the values of secret-named variables and the URL passwords of any variable;
  `redact_text` replaces those values wherever they appear, every token shape, a URL's password, and by name
  whatever follows a secret name (`GITHUB_PAT=...`, `--wandb-key ...`, `+trainer.api_key=...`); `redact_env`,
  `redact_argv` and `redact_json` (documents: the whole value under a secret-named key) apply the same rules.
- `find_plan_secrets(plan, secret_values)`: where a plan carries a secret (plans must never hold one): a
  secret-named env entry, a value after a secret flag or in a secret-named override, a token shape or URL password
  anywhere, or the value of a secret environment variable anywhere. `find_words_secrets(words)` does the same for a
  launch prefix. `${NAME}` references are fine.

Caveats:
- Only values of at least 4 characters are searched for in text: shorter ones would redact unrelated text.
- A secret the harness never sees (one that exists only inside a container) and that has no known shape cannot be
  redacted by it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

REDACTED = "<redacted>"
_MIN_SECRET_LEN = 4
_EXACT_SECRET_NAMES = frozenset({"WANDB_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"})
_SECRET_WORDS = frozenset(
    {"token", "pat", "auth", "credential", "credentials", "password", "passwd", "passphrase", "secret", "apikey"}
)
_SECRET_PAIRS = frozenset({("api", "key"), ("api", "keys"), ("private", "key"), ("secret", "key"), ("wandb", "key")})
_SETTING_WORDS = frozenset(
    {"mode", "type", "kind", "method", "scheme", "path", "file", "dir", "sock", "socket", "name", "url", "uri"}
    | {"host", "port", "endpoint", "enabled", "enable", "disabled", "disable", "required", "header", "provider"}
)
"""A last word that makes a secret-sounding name a setting about the secret, not the secret (RAY_AUTH_MODE=token)."""
_TOKENIZER_WORDS = frozenset(
    {"eod", "eos", "bos", "pad", "unk", "sep", "cls", "mask", "prefix", "middle", "suffix", "special", "stop"}
)
"""Options naming one of a tokenizer's tokens (--fim-eod-token, --rl-skip-bos-token): data, not credentials."""
_PLAIN_VALUE = re.compile(r"(?i)(?:true|false|yes|no|none|null|[-+]?[0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)")
"""A switch or a number after a secret-sounding name (`data.balance_dp_token=True`, `--...-per-token 4`): no secret."""
_ACCESS_KEY = re.compile(r"access[-_.]?key", re.IGNORECASE)
_WORD_BREAK = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")

_SHAPES = {
    "a GitHub token": r"gh[pousr]_[A-Za-z0-9]{30,}",
    "a GitHub fine-grained token": r"github_pat_[A-Za-z0-9_]{30,}",
    "a Hugging Face token": r"hf_[A-Za-z0-9]{30,}",
    "an AWS access key id": r"(?:AKIA|ASIA)[A-Z0-9]{16}",
    "a Slack token": r"xox[abposr]-[A-Za-z0-9-]{10,}|xapp-[0-9]-[A-Za-z0-9-]{10,}",
    "an sk- API key": r"sk-[A-Za-z0-9_-]{20,}",
    "a JWT": r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
}
_SHAPE = re.compile(
    "|".join(f"(?P<s{i}>(?<![A-Za-z0-9_])(?:{rx})(?![A-Za-z0-9_]))" for i, rx in enumerate(_SHAPES.values()))
)
_URL_PASSWORD = re.compile(r"(://[^\s:/@'\"]*):(?!<redacted>@)([^\s/@'\"]+)@")

_ASSIGNMENT_IN_TEXT = re.compile(r"(?<![\w.+~-])([-+~]{0,2}[A-Za-z_][\w.-]*)=(?!<redacted>)([^\s'\"]+)")
_SECRETISH = r"(?:token|pat|auth|credential|pass|secret|key)"
_FLAG_IN_TEXT = re.compile(rf"(?<![\w.-])(--?[\w.-]*{_SECRETISH}[\w.-]*)([ \t]+)(?![-<])([^\s'\"]+)", re.IGNORECASE)


def _words(name: str) -> list[str]:
    return [word.lower() for word in _WORD_BREAK.split(name) if word]


def is_secret_name(name: str) -> bool:
    """An environment variable (or a document key in capitals) that holds a secret (module docstring)."""
    if name.upper() in _EXACT_SECRET_NAMES or _ACCESS_KEY.search(name):
        return True
    words = _words(name)
    if not words or words[-1] in _SETTING_WORDS:
        return False
    pairs = set(zip(words, words[1:], strict=False))
    return (
        words[-1] == "key"
        or bool(_SECRET_WORDS.intersection(words) or _SECRET_PAIRS & pairs)
        or any("password" in word or "passwd" in word for word in words)
    )


def is_secret_option(word: str) -> bool:
    """A command-line flag (`--github-token`) or a Hydra/env assignment name (`+trainer.api_key`, `HF_TOKEN`)."""
    name = word.lstrip("-+~").split(".")[-1]
    if _ACCESS_KEY.search(name):
        return True
    if not word.startswith("-") and name.isupper():
        return is_secret_name(name)  # an environment assignment NAME=value
    words = _words(name)
    if not words:
        return False
    if words in (["key"], ["token"]) or tuple(words[-2:]) in _SECRET_PAIRS:
        return True
    if words[-1] == "token" and len(words) > 1 and words[-2] in _TOKENIZER_WORDS:
        return False
    if words[-1] == "secret" and len(words) == 1:
        return False  # `--secret X`: which secret it names is judged by X's shape
    return words[-1] in _SECRET_WORDS or "password" in words[-1] or "passwd" in words[-1]


def token_shapes(text: str) -> list[str]:
    """The kinds of token shapes (and URL passwords) in `text`, in order; empty when there is none."""
    kinds = [list(_SHAPES)[int(m.lastgroup[1:])] for m in _SHAPE.finditer(text)]
    return kinds + ["a password in a URL"] * len(_URL_PASSWORD.findall(text))


def _holds_secret(name: str, value: str) -> bool:
    """`value` given to `name` is a secret by the name's rules (not a switch, a number or a `${NAME}` reference)."""
    if not value or value.startswith("${") or _PLAIN_VALUE.fullmatch(value):
        return False
    return is_secret_name(name) if name.isupper() else is_secret_option(name)


def _redact_assignment(match: re.Match[str]) -> str:
    name = match.group(1)
    return f"{name}={REDACTED}" if _holds_secret(name, match.group(2)) else match.group(0)


def _redact_flag(match: re.Match[str]) -> str:
    flag, gap = match.group(1), match.group(2)
    return f"{flag}{gap}{REDACTED}" if _holds_secret(flag, match.group(3)) else match.group(0)


@dataclass(frozen=True)
class Redactor:
    """Replaces known secret values wherever they appear; longer values first so overlapping secrets vanish whole."""

    values: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def from_environ(cls, *envs: Mapping[str, str]) -> Redactor:
        found = set()
        for env in envs:
            for name, value in env.items():
                if is_secret_name(name):
                    found.add(value)
                found.update(match.group(2) for match in _URL_PASSWORD.finditer(value))
        found = {value for value in found if len(value) >= _MIN_SECRET_LEN}
        return cls(values=tuple(sorted(found, key=len, reverse=True)))

    def redact_text(self, text: str) -> str:
        for value in self.values:
            if value in text:
                text = text.replace(value, REDACTED)
        text = _SHAPE.sub(REDACTED, text)
        if "@" in text:
            text = _URL_PASSWORD.sub(rf"\1:{REDACTED}@", text)
        if "=" in text:
            text = _ASSIGNMENT_IN_TEXT.sub(_redact_assignment, text)
        if "-" in text:
            text = _FLAG_IN_TEXT.sub(_redact_flag, text)
        return text

    def redact_env(self, env: Mapping[str, str]) -> dict[str, str]:
        return {name: (REDACTED if is_secret_name(name) else self.redact_text(value)) for name, value in env.items()}

    def redact_argv(self, argv: Iterable[str]) -> list[str]:
        words = list(argv)
        out: list[str] = []
        for index, word in enumerate(words):
            if index and _flag_value_is_secret(words, index - 1):
                out.append(REDACTED)
                continue
            flag, eq, value = word.partition("=")
            if eq and _holds_secret(flag, value):
                out.append(f"{flag}={REDACTED}")  # --flag=value, NAME=value, Hydra overrides
            else:
                out.append(self.redact_text(word))
        return out

    def redact_json(self, value: Any) -> Any:
        """Redact every string inside a JSON-like value (dict keys included), and a string under a secret key."""
        if isinstance(value, str):
            return self.redact_text(value)
        if isinstance(value, dict):
            return {
                self.redact_text(str(k)): REDACTED if _is_secret_key(str(k)) and isinstance(v, str) and v else
                self.redact_json(v)
                for k, v in value.items()
            }  # fmt: skip
        if isinstance(value, list):
            return [self.redact_json(v) for v in value]
        return value


def _is_secret_key(key: str) -> bool:
    """A document key that names a secret: an environment-style name, or a secret option (not bare token/key)."""
    if key.isupper():
        return is_secret_name(key)
    return key.lower() not in ("token", "key", "tokens", "keys") and is_secret_option(key)


def _shape_problems(where: str, text: str) -> list[str]:
    return [f"{where} ({kind})" for kind in dict.fromkeys(token_shapes(text))]


def _flag_value_is_secret(words: list[str], index: int) -> bool:
    """words[index] is a secret flag given as two words (`--wandb-key VALUE`) and the next word is its secret."""
    flag, following = words[index], words[index + 1]
    if not flag.startswith("-") or "=" in flag or following.startswith("-"):
        return False
    return _holds_secret(flag, following)


def _named_secrets(words: list[str], where: str) -> list[str]:
    """The flags and NAME=value / override words whose value is a secret by its name (never naming the value)."""
    problems = []
    for index, word in enumerate(words):
        flag, eq, value = word.partition("=")
        if (eq and _holds_secret(flag, value)) or (index + 1 < len(words) and _flag_value_is_secret(words, index)):
            problems.append(f"{where}: {flag}")
    return problems


def find_words_secrets(words: list[str], where: str, secret_values: Iterable[str] = ()) -> list[str]:
    """Secrets in a word list (argv, a launch prefix): a value after a secret flag or in a secret NAME=value or
    override word, a token shape, or a secret variable's value anywhere; `${NAME}` references are fine."""
    problems = _named_secrets(words, where)
    for index, word in enumerate(words):
        problems += _shape_problems(f"{where}[{index}]", word)
        if any(secret in word for secret in secret_values):
            problems.append(f"{where}[{index}] holds the value of a secret environment variable")
    return list(dict.fromkeys(problems))


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
            problems += _named_secrets([str(w) for w in cell.get(key) or []], f"cells[{cell_id}].{key}")
    for where, text in _strings_with_paths(dict(plan), ""):
        problems += _shape_problems(where, text)
        if any(secret in text for secret in values):
            problems.append(f"{where} (the value of a secret environment variable)")
    return list(dict.fromkeys(problems))
