"""Bounds on what one input may cost: every parser checks them, so no file exhausts memory.

Each limit has a default sized for real traces (the largest real Kineto file we know is a few
GB of JSON) and an environment variable that raises it. A file past a limit is one
:class:`~parsers.errors.InputError` that names the limit, the value and the variable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import InputError


@dataclass(frozen=True)
class Limit:
    name: str
    default: int
    env: str
    what: str

    @property
    def value(self) -> int:
        raw = os.environ.get(self.env, "").strip()
        if not raw:
            return self.default
        try:
            value = int(float(raw))
        except ValueError:
            return self.default
        return value if value > 0 else self.default

    def check(self, path: object, amount: int) -> None:
        """Raise the one-line error when ``amount`` is past the limit."""
        if amount > self.value:
            raise InputError(
                str(path),
                f"{self.what} is over rlperf's limit ({amount:,} > {self.value:,}); "
                f"set {self.env} to raise it",
            )


DECOMPRESSED_BYTES = Limit(
    "decompressed_bytes", 16 * 2**30, "RLPERF_MAX_BYTES", "decompressed size in bytes"
)
STRING_BYTES = Limit(
    "string_bytes", 64 * 2**20, "RLPERF_MAX_STRING", "length of one string in bytes"
)
NESTING = Limit("nesting", 256, "RLPERF_MAX_NESTING", "JSON nesting depth")
EVENTS = Limit("events", 200_000_000, "RLPERF_MAX_EVENTS", "number of events in one file")

LIMITS: tuple[Limit, ...] = (DECOMPRESSED_BYTES, STRING_BYTES, NESTING, EVENTS)
"""Every limit, as docs/errors.md lists them."""
