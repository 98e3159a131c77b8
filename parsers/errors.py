"""Errors for bad input: one line that names the file and the problem."""

from __future__ import annotations

from pathlib import Path

_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_NAMED = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
_UNPRINTABLE = {
    **{c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))},
    **{c: f"\\u{c:04x}" for c in _BIDI},
    **_NAMED,
}


def printable(text: object) -> str:
    """``text`` safe for a terminal line: control characters (newlines, ANSI escapes) and bidi
    overrides from file and event names are shown escaped, so a name can neither break the one-line
    error contract nor recolour, move or reorder what the user reads."""
    return str(text).translate(_UNPRINTABLE)


class InputError(Exception):
    """A source file that cannot be read; the CLI prints it as one line and exits with status 2."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{printable(self.path)}: {printable(problem)}")

    def __reduce__(self) -> tuple[type[InputError], tuple[str, str]]:
        """Rebuilt from path and problem, so the error crosses from a parsing process intact."""
        return type(self), (self.path, self.problem)
