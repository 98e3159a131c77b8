"""What the user asked for, fixed when a run is built: ``--framework``, ``--rules``, ``--steps``,
``--ranks``, ``--layout``, ``--guidelines``.

Options are checked before any file is read (:meth:`Options.checked`: a bad value is one
:class:`InputError` line naming the option) and given to ``analyzer.assemble.build``, so
that every step of the pipeline, rank assignment included, sees the user's rules.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from parsers.errors import InputError
from taxonomy import profiles as tp
from taxonomy.collectives import CollectiveRulesError, parse_layout


@dataclass(frozen=True)
class Options:
    """The user's choices; None is "not given" (the default behaviour)."""

    framework: str | None = None
    """A profile name or a framework a profile lists (``--framework``)."""
    rules: str | None = None
    """A user profile-rules file put before the bundled ones (``--rules``)."""
    steps: str | None = None
    """The ``--steps`` selection as typed (``3-5,8``)."""
    ranks: str | None = None
    """The ``--ranks`` selection as typed."""
    layout: str | None = None
    """Parallel degrees of the rank layout (``--layout tp=2,pp=2``)."""
    guidelines: str | None = None
    """A user guideline file merged into the catalogue (``--guidelines``)."""
    collective_rules: str | None = None
    """A user collective-rules file put before ``taxonomy/collectives.toml``."""

    @property
    def step_selection(self) -> Selection | None:
        return parse_selection(self.steps)

    @property
    def rank_selection(self) -> Selection | None:
        return parse_selection(self.ranks)

    @classmethod
    def checked(
        cls,
        *,
        framework: str | None = None,
        steps: str | None = None,
        ranks: str | None = None,
        rules: str | Path | None = None,
        layout: str | None = None,
        guidelines: str | Path | None = None,
    ) -> Options:
        """Options from the command line, each checked: a bad value is one :class:`InputError`
        line (the guideline file is checked by its loader, ``analyses.guidelines``)."""
        for flag, text in (("--steps", steps), ("--ranks", ranks)):
            if text is not None and not text.strip():
                noun = flag.removeprefix("--")
                raise InputError(
                    flag, f"empty selection (use e.g. 2-4,7, or leave {flag} out for all {noun})"
                )
            try:
                parse_selection(text)
            except ValueError as exc:
                raise InputError(flag, str(exc)) from None
        try:
            profiles = tp.load_profiles(rules)
        except tp.ProfileError as exc:
            raise InputError(rules or "--rules", str(exc).removeprefix(f"{rules}: ")) from None
        if framework and not any(
            framework == p.name or framework in p.frameworks for p in profiles.values()
        ):
            raise InputError(
                "--framework", f"no profile {framework!r} (one of {', '.join(sorted(profiles))})"
            )
        if layout:
            try:
                parse_layout(layout)
            except CollectiveRulesError as exc:
                raise InputError("--layout", str(exc)) from None
        return cls(framework=framework or None, steps=steps or None, ranks=ranks or None,
                   rules=str(rules) if rules else None, layout=layout or None,
                   guidelines=str(guidelines) if guidelines is not None else None)


INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True)
class Selection:
    """A ``--steps`` or ``--ranks`` selection as inclusive ranges, sorted and merged: ``0-10**10``
    is one pair, not ten billion numbers (a list of them exhausted memory)."""

    spans: tuple[tuple[int, int], ...]

    def __contains__(self, value: object) -> bool:
        return isinstance(value, int) and any(a <= value <= b for a, b in self.spans)

    def count(self) -> int:
        """How many values are selected (``len`` cannot say more than 2**63)."""
        return sum(b - a + 1 for a, b in self.spans)

    def __str__(self) -> str:
        return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in self.spans)

    def expr(self, column: str) -> pl.Expr:
        """Whether ``column`` lies in the selection (bounds past int64 cannot match a value)."""
        inside = [
            pl.col(column).is_between(max(a, INT64[0]), min(b, INT64[1])) for a, b in self.spans
        ]
        return pl.any_horizontal(inside)

    def within(self, values: Iterable[int]) -> list[int]:
        """The ``values`` selected, sorted."""
        return sorted({v for v in values if v in self})

    def without(self, values: Iterable[int]) -> Selection:
        """The selection less ``values``: what was asked for and is not there."""
        return Selection(_merged(_cut(self.spans, sorted(set(values)))))


def _cut(spans: Iterable[tuple[int, int]], holes: list[int]) -> list[tuple[int, int]]:
    out = []
    for a, b in spans:
        for hole in holes:
            if a <= hole <= b:
                if a < hole:
                    out.append((a, hole - 1))
                a = hole + 1
        if a <= b:
            out.append((a, b))
    return out


def _merged(spans: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


def parse_selection(text: str | None) -> Selection | None:
    """``"2-4,7"`` → the ranges 2-4 and 7; None or empty → no selection."""
    if text is None or not str(text).strip():
        return None
    found = []
    for part in str(text).split(","):
        part = part.strip()
        match = re.fullmatch(r"(-?\d{1,30})(?:\s*(?:-|\.\.)\s*(-?\d{1,30}))?", part)
        if not match:
            raise ValueError(f"bad selection {part!r} (use e.g. 2-4,7)")
        a = int(match.group(1))
        b = int(match.group(2)) if match.group(2) is not None else a
        found.append((min(a, b), max(a, b)))
    return Selection(_merged(found))


def keep_ranks(frame: pl.DataFrame, ranks: Selection | None) -> pl.DataFrame:
    """The rows of ``frame`` on ``ranks`` or a rank below 0 (all of them when None)."""
    return frame if ranks is None else frame.filter((pl.col("rank") < 0) | ranks.expr("rank"))
