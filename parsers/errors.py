"""Errors for bad input: one line that names the file and the problem."""

from __future__ import annotations

from pathlib import Path


class InputError(Exception):
    """A source file that cannot be read; the CLI prints it as one line and exits with status 2."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")
