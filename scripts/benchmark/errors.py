"""The one error path for user mistakes: `UserError` (exit 2, one line naming the file or option, no traceback).

- `UserError(message)`: raised anywhere below a command; the wrapper prints `error: <message>` and exits 2.
- `user_errors(callback)`: wraps every command of run.py, so that a missing optional dependency names the extra to
  install, and an OSError on a path the user gave names that path; anything else is a bug and keeps its traceback.
- `require(module, purpose)`: import an optional dependency or raise the UserError that names its extra.
"""

from __future__ import annotations

import errno
import functools
import importlib
from collections.abc import Callable
from typing import Any

import typer

EXIT_BAD_INPUT = 2


# Top-level module -> the extra of pyproject.toml that installs it; each framework adapter adds its own modules when
# the registry registers it (`declare_extras`), so this module names no framework.
MODULE_EXTRAS: dict[str, str] = {
    "matplotlib": "analysis",
    "arch": "analysis",
    "sqlalchemy": "analysis",
    "psycopg": "analysis",
    "otava": "analysis",
    "torch": "flops",
    "transformers": "flops",
}

# Database drivers a store URL can name that this project does not install.
FOREIGN_DRIVERS: dict[str, str] = {"MySQLdb": "mysql", "pymysql": "mysql", "cx_Oracle": "oracle", "pyodbc": "mssql"}


def declare_extras(extras: dict[str, str]) -> None:
    """Top-level module -> extra, as a framework adapter declares them (the registry calls this on register)."""
    MODULE_EXTRAS.update(extras)


class UserError(Exception):
    """Bad input: exit 2 with one message, never a traceback."""

    def format_message(self) -> str:
        return str(self)


def missing_module_error(exc: ModuleNotFoundError) -> UserError | None:
    """The UserError for an optional dependency that is not installed, or None when the module is not optional."""
    root = (exc.name or "").split(".")[0]
    if root in MODULE_EXTRAS:
        extra = MODULE_EXTRAS[root]
        return UserError(
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
        typer.echo(f"error: {error.format_message()}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT)

    return wrapped


def require(module: str) -> Any:
    """Import an optional dependency, or raise the UserError naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        error = missing_module_error(exc)
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
