"""Errors a user can act on. The CLI prints them as one line and exits with code 2."""

from __future__ import annotations

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
