"""Errors a user can act on. The CLI prints them as one line and exits with code 2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class DlscopeError(Exception):
    """A problem with the user's input or request, reported without a traceback."""

    exit_code = 2


class InputError(DlscopeError):
    """A file that cannot be read as what it was supposed to be."""

    def __init__(self, path: str | Path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self):
        """Rebuilt from (path, problem), so it crosses process boundaries (worker imports) intact."""
        return (type(self), (self.path, self.problem))


@contextmanager
def reading(path: str | Path) -> Iterator[None]:
    """Turn the operating system's reasons a file cannot be read into one-line :class:`InputError` s."""
    try:
        yield
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except IsADirectoryError:
        raise InputError(path, "is a directory, not a trace file") from None
    except PermissionError:
        raise InputError(path, "permission denied") from None
    except OSError as e:
        raise InputError(path, f"cannot be read ({e.strerror or e})") from None


def read_json_file(path: str | Path, what: str):
    """A user-supplied JSON file (a rules config, a GPU spec), or a one-line :class:`InputError` saying why not."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise InputError(path, f"cannot read {what}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InputError(path, f"{what} is not JSON: {exc}") from None
