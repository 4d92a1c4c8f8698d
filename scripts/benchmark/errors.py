"""The one error path for user mistakes: `UserError` (exit 2, one line naming the file or option, no traceback).

- `UserError(message)`: raised anywhere below a command; the wrapper prints `error: <message>` and exits 2.
- `user_errors(callback)`: wraps every command of run.py, so that a missing optional dependency names the extra to
  install, and an OSError on a path the user gave names that path; anything else is a bug and keeps its traceback.
- `require(module, extra)`: import an optional dependency or raise the UserError that names its extra.
- `database_error(exc)`: a database driver's failure as one line, without the SQL statement or its parameters.
- Every message goes through the redaction of common/redaction.py: a secret in a path or a value is never printed.
"""

from __future__ import annotations

import errno
import functools
import importlib
import os
from collections.abc import Callable
from typing import Any

import typer

from scripts.benchmark.common.redaction import Redactor

EXIT_BAD_INPUT = 2


# Top-level module -> the extra of pyproject.toml that installs it; each framework adapter adds its own modules when
# the registry registers it (`declare_extras`), so this module names no framework.
MODULE_EXTRAS: dict[str, str] = {
    "matplotlib": "analysis",
    "arch": "analysis",
    "sqlalchemy": "analysis",
    "psycopg": "analysis",
    "torch": "flops",
    "transformers": "flops",
}

# Database drivers a store URL can name that this project does not install.
FOREIGN_DRIVERS: dict[str, str] = {"MySQLdb": "mysql", "pymysql": "mysql", "cx_Oracle": "oracle", "pyodbc": "mssql"}


MODULE_INSTALLS: dict[str, str] = {
    "otava": "pip install --no-deps apache-otava==0.8.0 (its own numpy pin would downgrade numpy; the change points "
    "need only numpy and scipy)",
}
"""Optional dependencies no extra installs, and the command that does."""


def declare_extras(extras: dict[str, str]) -> None:
    """Top-level module -> extra, as a framework adapter declares them (the registry calls this on register)."""
    MODULE_EXTRAS.update(extras)


class UserError(Exception):
    """Bad input: exit 2 with one message, never a traceback."""

    def format_message(self) -> str:
        return str(self)


class MissingExtra(UserError):
    """An optional dependency is not installed: the message names the extra that installs it."""


def missing_module_error(exc: ModuleNotFoundError, extra: str | None = None) -> UserError | None:
    """The UserError for an optional dependency that is not installed (installed by `extra`, else by the extra
    MODULE_EXTRAS names), or None when the module is not optional."""
    root = (exc.name or "").split(".")[0]
    if root in MODULE_INSTALLS:
        return MissingExtra(f"this command needs {root}, which is not installed: {MODULE_INSTALLS[root]}")
    if root in MODULE_EXTRAS:
        extra = extra or MODULE_EXTRAS[root]
        return MissingExtra(
            f"this command needs the '{extra}' extra ({root} is not installed): pip install -e \".[{extra}]\""
        )
    if root in FOREIGN_DRIVERS:
        return UserError(
            f"--store: a {FOREIGN_DRIVERS[root]} URL needs the {root} driver, which this project does not install; "
            "use a SQLite path or a postgresql:// URL"
        )
    return None


FULL_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO})


def os_error_message(exc: OSError) -> str:
    where = exc.filename if exc.filename is not None else "a file"
    fix = "; free space (or make the file system writable) and run the command again"
    return f"{where}: {exc.strerror or exc}" + (fix if exc.errno in FULL_DISK_ERRNOS else "")


def database_error(exc: BaseException) -> UserError | None:
    """A database driver's failure wrapped by SQLAlchemy as one line: the driver's own first line, never the SQL
    statement and its parameters that SQLAlchemy appends (they can hold a run's paths and provenance); None for
    anything else."""
    orig = getattr(exc, "orig", None)
    if orig is None or not type(exc).__module__.startswith("sqlalchemy"):
        return None
    lines = str(orig).strip().splitlines()
    reason = f"{type(orig).__name__}: {lines[0]}" if lines else type(orig).__name__
    return UserError(f"the history database failed ({reason}); check that it is reachable, then run the command again")


def user_errors(callback: Callable[..., Any]) -> Callable[..., Any]:
    """A command callback whose missing extras and path errors become UserError (exit 2)."""

    @functools.wraps(callback)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return callback(*args, **kwargs)
        except UserError as exc:
            error: UserError | None = exc
        except ModuleNotFoundError as exc:
            error = missing_module_error(exc)
            if error is None:
                raise
        except OSError as exc:
            if exc.filename is None:
                raise
            error = UserError(os_error_message(exc))
        except Exception as exc:
            error = database_error(exc)
            if error is None:
                raise
        echo_error(error.format_message())
        raise typer.Exit(EXIT_BAD_INPUT)

    return wrapped


def echo_error(message: str) -> None:
    """`error: MESSAGE` on stderr, with every secret of this environment and every token shape redacted."""
    typer.echo(f"error: {Redactor.from_environ(os.environ).redact_text(message)}", err=True)


def require(module: str, extra: str | None = None) -> Any:
    """Import an optional dependency, or raise the UserError naming the extra that installs it (`extra` when the
    command's own extra is another than the module's usual one: torch for a recording comes with `recording`)."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        error = missing_module_error(exc, extra)
        if error is None:
            raise
        raise error from exc


def wrap_commands(app: typer.Typer) -> typer.Typer:
    """Every command (and the callback) of `app` through `user_errors`: what run.py's app is built with."""
    for command in app.registered_commands:
        command.callback = user_errors(command.callback)
    if app.registered_callback is not None:
        app.registered_callback.callback = user_errors(app.registered_callback.callback)
    return app
