"""Run identity: which parsed sources belong to one run, and which run the user chose.

rlperf analyses one run at a time: its ranks on one timeline, its steps, its logs. Merging
sources of different runs gives wrong numbers without a sign of it (two logs' steps laid over
each other, the hours between two captures counted as idle, two processes on one rank), so the
sources are grouped by what they state before assembly (docs/assembly.md, "Run identity"):

* **Copies** of one capture (same format, ranks, window, event and metric rows and stated facts)
  are read once, with a warning.
* **Traces** join a run when their absolute time window overlaps it (within
  :data:`WINDOW_SLACK_NS`) and no member states the same rank or another world size. Per-role
  profiling windows of one job (verl's ``<role>/`` profiler folders, or their ``<role>__``
  file-name prefixes) join each other without overlapping (:func:`_other_role`). A trace
  without a wall clock has no window to overlap: it joins a run only when its file name is
  another member's with the rank changed (one job's rank files), else it is a run of its own.
* **Logs** join each other unless their frameworks, world sizes, settings (:data:`RUN_CONFIG`)
  or wall-clock windows disagree;
  a log group joins the traces its window overlaps (within :data:`LOG_SLACK_NS`, its stamps'
  time zone is unknown), or the traces when both are the only ones there are.

Several runs → :class:`RunsError` (exit 2) listing them, unless ``--run K`` chooses one.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

import polars as pl

from parsers import InputError, ParsedSource
from parsers.errors import printable
from parsers.source import RANK_IN_NAME_BOUNDED
from taxonomy import profiles as tp

from ..model.scalars import number_or_none
from ..model.units import duration, spans

WINDOW_SLACK_NS = 2_000_000_000
"""Trace windows closer than this overlap: hosts' clocks and profilers' start differ by less."""
LOG_SLACK_NS = 14 * 3_600_000_000_000
"""A log's stamps are read as UTC; the zone they were written in is up to 14 h off."""
EPOCH_MIN_NS = 10**18
"""Times before 2001-09 are not on the epoch clock (relative times that start near 0)."""
RELATIVE_MARKERS = ("relative", "unknown", "quarter", "from 0", "none")
"""A ``time_base`` with one of these gives no absolute window (docs/events.md)."""
RUN_CONFIG = (
    "algorithm", "train_batch_size", "max_prompt_length", "max_response_length", "rollout_n",
    "train_strategy",
)
"""Settings a log states (its meta) that every log of one run states alike: two logs that
disagree on one are two runs, even when neither has a wall clock to tell them apart."""
ROLE_GAP_NS = 3_600_000_000_000
"""Per-role profiling windows of one job lie closer than this: verl profiles each role of a
step in its own window, one after another (rl-insight's rollout and actor windows: 38 s)."""
LISTED_FILES = 3
"""Files named per run in the refusal; the rest are counted."""


@dataclass
class Facts:
    """What a source states about the run it belongs to."""

    index: int
    source: ParsedSource
    log: bool
    ranks: frozenset[int]
    world: int | None
    framework: str | None
    window: tuple[int, int] | None
    """Absolute ``[start, end]`` in epoch ns; None when the source has no wall clock."""
    content: str = ""
    """:attr:`Statement.content`."""
    settings: tuple = ()
    """:attr:`Statement.settings`."""


@dataclass
class Group:
    """Sources of one run so far, with the window they span."""

    members: list[Facts] = field(default_factory=list)
    untimed: list[tuple[str, str]] = field(default_factory=list)
    """Members without a wall clock that joined it, with what tied them (file name, why)."""

    @property
    def roles(self) -> dict[str, list[Facts]]:
        """Its traces in per-role profiler folders by their role's stage, where it holds more
        than one role (profiling windows of one job, :func:`_other_role`); else empty."""
        found: dict[str, list[Facts]] = {}
        for m in self.members:
            if (role := _role_window(m)) is not None:
                found.setdefault(role[1], []).append(m)
        return found if len(found) > 1 else {}

    @property
    def window(self) -> tuple[int, int] | None:
        spans = [m.window for m in self.members if m.window]
        return (min(s for s, _ in spans), max(e for _, e in spans)) if spans else None

    @property
    def indexes(self) -> list[int]:
        return sorted(m.index for m in self.members)


@dataclass
class FoundRun:
    """One run found in the input: its sources (indexes into the parsed list) and what it is."""

    number: int
    indexes: list[int]
    paths: list[Path]
    summary: str


class RunsError(InputError):
    """The input holds several runs and none was chosen: one line saying so, one per run, and
    how to choose (the CLI prints it as any :class:`InputError`, exit status 2)."""

    multiline = True
    """Its lines are escaped one by one, so the CLI prints them as lines instead of one line."""

    def __init__(self, where: str, runs: list[FoundRun], reasons: list[str]) -> None:
        self.runs, self.reasons = runs, reasons
        why = f" ({'; '.join(reasons)})" if reasons else ""
        lines = [f"{len(runs)} separate runs found{why}; rlperf analyses one run at a time"]
        lines += [f"  run {r.number}: {r.summary}" for r in runs]
        lines.append(
            "choose one with --run K (K as listed above, or a path or file-name prefix of the "
            "run's files)"
        )
        super().__init__(where, lines[0])
        self.problem = "\n".join(lines)
        self.args = ("\n".join(printable(line) for line in [f"{where}: {lines[0]}", *lines[1:]]),)

    def __str__(self) -> str:
        return self.args[0]

    def __reduce__(self) -> tuple[type[InputError], tuple[str, str]]:
        return InputError, (self.path, self.problem)


# --- facts -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Statement:
    """What a source's events say about its run: computed where the events are (a parsing
    worker, a Ray task), so that the run can be chosen from these alone."""

    log: bool
    ranks: frozenset[int]
    window: tuple[int, int] | None
    content: str = ""
    """Digest of the source's event and metric rows and of its meta (:func:`content`): with the
    format, a copy's fingerprint."""
    settings: tuple = ()
    """Its meta's :data:`RUN_CONFIG` values (None where not stated), in that order."""


def statement(parsed: ParsedSource) -> Statement:
    events = parsed.events
    log = parsed.format.endswith("-log") or (
        events.height > 0 and bool((events["kind"] == "log_stage").all())
    )
    ranks = frozenset(int(r) for r in events.filter(pl.col("rank") >= 0)["rank"].unique().to_list())
    settings = tuple(_settled(parsed.meta.get(k)) for k in RUN_CONFIG)
    return Statement(log, ranks, _window(parsed), content(parsed), settings)


def _settled(value: object) -> str | None:
    """A setting as compared: ``256`` and ``"256"`` alike."""
    return None if value is None or value == "" else str(value)


def content(parsed: ParsedSource) -> str:
    """What the capture holds, whatever file it came from: its event and metric rows (as a set,
    their ``source`` number aside) and its meta. Counts and windows alone called two logs of
    different runs copies when neither had an event or a wall clock."""
    digest = hashlib.sha1()
    for table in (parsed.events, parsed.metrics):
        rows = table.drop("source", strict=False)
        digest.update(f"{rows.height}:{rows_sum(rows)};".encode())
    digest.update(_stated(parsed.meta).encode())
    return digest.hexdigest()


def rows_sum(rows: pl.DataFrame) -> int:
    """The exact sum of the rows' 64-bit hashes: the same whatever their order, another when one
    row differs. Summed as Int128, so that it never depends on what polars does when a UInt64
    sum overflows (it wraps today; an error or a float would lose the digest)."""
    if not (rows.height and rows.width):
        return 0
    return int(rows.hash_rows(seed=0).cast(pl.Int128).sum())


def _stated(meta: dict) -> str:
    """The meta as text, key order aside where the keys can be ordered (mixed key types, as a
    dict of ranks beside names, cannot)."""
    try:
        return json.dumps(meta, sort_keys=True, default=str)
    except TypeError:
        return repr(meta)


def facts(index: int, parsed: ParsedSource, said: Statement | None = None) -> Facts:
    said = said or statement(parsed)
    world = parsed.meta.get("world_size")
    return Facts(
        index=index, source=parsed, log=said.log, ranks=said.ranks if not said.log else frozenset(),
        world=int(world) if isinstance(world, int) and world > 0 else None,
        framework=parsed.meta.get("framework") or None, window=said.window,
        content=said.content, settings=said.settings,
    )


def _window(parsed: ParsedSource) -> tuple[int, int] | None:
    """The absolute window the source covers: its events' and the window its profiler states it
    recorded (:func:`profiler_window_ns`), together. A near-empty trace's one operator (1.99 µs
    in rl-insight's rollout header) is not what its profiler ran for (its ``Trace`` span: 10.08
    s)."""
    base = str(parsed.meta.get("time_base") or "").lower()
    if parsed.events.height == 0 or any(m in base for m in RELATIVE_MARKERS):
        return None
    start = number_or_none(parsed.events["start_ns"].min())
    end = number_or_none(parsed.events["end_ns"].max())
    if start is None or end is None or start < EPOCH_MIN_NS:
        return None
    stated = profiler_window_ns(parsed.meta)
    if stated and stated[0] >= EPOCH_MIN_NS:
        start, end = min(start, stated[0]), max(end, stated[1])
    return int(start), int(max(start, end))


def profiler_window_ns(meta: dict) -> tuple[int, int] | None:
    """The window the profiler states it recorded (Kineto's ``Trace`` span, else its start and
    end instants: ``meta["profiler_window_us"]``) on the event table's clock, where the source
    states one in a time base whose offset is known."""
    window = meta.get("profiler_window_us")
    base = {"baseTimeNanoseconds": meta.get("base_time_ns"), "epoch microseconds": 0}.get(
        meta.get("time_base", "")
    )
    if not window or base is None:
        return None
    try:
        lo, hi = (round(float(w) * 1000) + int(base) for w in window)
    except (TypeError, ValueError, OverflowError):
        return None
    return lo, hi


def _fingerprint(f: Facts) -> tuple[str, str]:
    """Equal for copies of one capture: its format and what it holds (:func:`content` covers
    every row, so the ranks, window, counts and durations the rows give, and the meta, so the
    rank it states and its clock)."""
    return f.source.format, f.content


def _deduplicate(found: list[Facts]) -> list[Facts]:
    """Drop copies of one capture (a file saved twice, a folder copied under another name)."""
    kept: dict[tuple, Facts] = {}
    for f in found:
        first = kept.setdefault(_fingerprint(f), f)
        if first is not f:
            roles = [folder_role(f.source.path), folder_role(first.source.path)]
            stages = [role_stage(r) for r in roles]
            places = [role_place(f.source.path), role_place(first.source.path)]
            differ = (
                f", although its {places[0]} names {roles[0]} ({stages[0]}) and the other's "
                f"{places[1]} {roles[1]} ({stages[1]})"
                if None not in stages and stages[0] != stages[1]
                else ""
            )
            first.source.warnings.append(
                f"{f.source.path.name}: a copy of {first.source.path.name} (same ranks, events "
                f"and time window{differ}); read once"
            )
    return list(kept.values())


def folder_role(path: Path) -> str:
    """The role a file's location names: the ``<role>__`` prefix of its name (verl's per-role
    profiler folders, flattened), else its folder's name."""
    return path.name.split("__", 1)[0] if "__" in path.name else path.parent.name


def role_place(path: Path) -> str:
    """Where :func:`folder_role` read the role: ``"file-name prefix"`` or ``"folder"`` (a
    message that said "folder" of verl's flattened ``actor_update__…`` files misled)."""
    return "file-name prefix" if "__" in path.name else "folder"


@cache
def role_stage(label: str) -> str | None:
    """The stage a folder's role names under the first framework profile that knows it (the
    built-in profiles, read once for all the copies a run has)."""
    profiles = tp.load_profiles()
    for profile in profiles.values():
        found = tp.classify([label], "trace", profile, profiles=profiles)
        if found["relation"].cast(pl.String).to_list() == ["stage"]:
            return str(found["stage"][0])
    return None


# --- grouping ----------------------------------------------------------------------------------


def _overlap(a: tuple[int, int], b: tuple[int, int], slack: int) -> bool:
    return a[0] <= b[1] + slack and b[0] <= a[1] + slack


def _trace_conflict(f: Facts, group: Group) -> str | None:
    """Why ``f`` is not of ``group``'s run, or None. Another role's profiling window of the
    same job (:func:`_other_role`) need not overlap the run: within :data:`ROLE_GAP_NS` of it
    is enough; its ranks are its own role's world's, so they may repeat a member's of another
    role (one device used by each role in turn), though not at the same time, and its world
    size may differ."""
    window = group.window
    if (
        f.window
        and window
        and not _overlap(f.window, window, WINDOW_SLACK_NS)
        and not (
            _overlap(f.window, window, ROLE_GAP_NS)
            and any(_other_role(f, m) for m in group.members)
        )
    ):
        return "time windows that do not overlap"
    for m in group.members:
        if _other_role(f, m):
            if f.ranks & m.ranks and f.window and m.window and _overlap(f.window, m.window, 0):
                return f"rank {min(f.ranks & m.ranks)} in two roles' captures at once"
            continue
        if f.ranks & m.ranks:
            return f"rank {min(f.ranks & m.ranks)} in more than one capture"
        if f.world and m.world and f.world != m.world:
            return "world sizes that disagree"
    return None


def _role_window(f: Facts) -> tuple[str, str, int] | None:
    """(profiler folder, role's stage, Kineto base time) of a Kineto trace in a per-role
    profiler folder (``<folder>/<role>/<file>``, or ``<folder>/<role>__<file>`` flattened) whose
    role a framework profile knows (:func:`role_stage`); else None."""
    meta = f.source.meta
    base = meta.get("base_time_ns")
    if f.source.format != "kineto" or meta.get("time_base") != "baseTimeNanoseconds":
        return None
    stage = role_stage(folder_role(f.source.path))
    if stage is None or not isinstance(base, int):
        return None
    path = f.source.path
    return _norm(path.parent if "__" in path.name else path.parent.parent), stage, base


def _other_role(f: Facts, m: Facts) -> bool:
    """``f`` and ``m`` are profiling windows of two roles of one job: each in its role's folder
    of one profiler folder, of different stages, with the same Kineto ``baseTimeNanoseconds``.
    That base is libkineto's clock floored to 7,889,238 s (every trace of those three average
    months shares it), so it only rules out traces of another period; the folder is what ties
    them."""
    a, b = _role_window(f), _role_window(m)
    return a is not None and b is not None and a[0] == b[0] and a[2] == b[2] and a[1] != b[1]


def _log_conflict(f: Facts, group: Group) -> str | None:
    for m in group.members:
        if f.framework and m.framework and f.framework != m.framework:
            return "logs of different frameworks"
        if f.world and m.world and f.world != m.world:
            return "world sizes that disagree"
        if _settings_disagree(f.settings, m.settings):
            return "log configurations that disagree"
    window = group.window
    if f.window and window and not _overlap(f.window, window, LOG_SLACK_NS):
        return "log times that do not overlap"
    return None


def _settings_disagree(a: tuple, b: tuple) -> bool:
    return any(x is not None and y is not None and x != y for x, y in zip(a, b, strict=False))


Tie = Callable[[Facts, Group], str | None]
"""What ties a source without a wall clock to a group (said in the run listing), or None."""


def _cluster(
    found: list[Facts], conflict, reasons: list[str], tie: Tie | None = None
) -> list[Group]:
    """Each source joins the first group it does not conflict with (windowed sources in time
    order first). A source without a wall clock joins only a group it alone can join and, given
    ``tie``, only one that something besides time ties it to: fitting is no evidence."""
    groups: list[Group] = []
    timed = sorted((f for f in found if f.window), key=lambda f: (f.window, f.index))
    for f in [*timed, *(f for f in found if not f.window)]:
        why = [conflict(f, g) for g in groups]
        fits = [g for g, w in zip(groups, why, strict=True) if w is None]
        if fits and f.window:
            fits[0].members.append(f)
            continue
        ties = [(g, t) for g in fits if (t := tie(f, g) if tie else "fitting only one log run")]
        if len(ties) == 1 and (tie or len(fits) == 1):
            ties[0][0].members.append(f)
            ties[0][0].untimed.append((f.source.path.name, ties[0][1]))
            continue
        reasons.extend(w for w in why if w)
        if len(ties) > 1:
            reasons.append("a source without a wall clock that fits more than one run")
        elif fits:
            reasons.append("a trace without a wall clock that nothing ties to another run")
        groups.append(Group([f]))
    return groups


def _rank_files_tie(f: Facts, group: Group) -> str | None:
    """``f``'s file name is a member's with another rank in it, in the same folder: the rank
    files of one job (``rank-0.json``, ``rank-1.json``), the one tie a trace without a wall clock
    has. The ranks the files hold must be the ones their names state."""
    mine = _rank_template(f)
    if mine is None:
        return None
    for m in group.members:
        theirs = _rank_template(m)
        if theirs and theirs[0] == mine[0] and theirs[1] != mine[1]:
            return f"its file name (rank {mine[1]} beside {m.source.path.name})"
    return None


def _rank_template(f: Facts) -> tuple[tuple[str, str], int] | None:
    """(folder, name with its rank blanked) and the rank, when the name states the one rank the
    source holds (or the source holds none)."""
    path = f.source.path
    found = RANK_IN_NAME_BOUNDED.search(path.name)
    if found is None:
        return None
    rank = int(found.group(1))
    if f.ranks and f.ranks != {rank}:
        return None
    blank = path.name[: found.start(1)] + "#" + path.name[found.end(1) :]
    return (_norm(path.parent), blank), rank


def _attach_logs(traces: list[Group], logs: list[Group], reasons: list[str]) -> list[Group]:
    """Log groups join the trace run their window overlaps, or the only trace run when they are
    the only logs; the rest are runs of their own."""
    alone: list[Group] = []
    undecided: list[Group] = []
    for log in logs:
        lw = log.window
        near = [
            (t, t.window)
            for t in traces
            if lw
            and t.window
            and _overlap(lw, t.window, LOG_SLACK_NS)
            and _frameworks_agree(log, t)
        ]
        if near and lw:
            start = lw[0]
            best, _ = min(near, key=lambda tw: abs(tw[1][0] - start))
            best.members.extend(log.members)
            best.untimed.extend(log.untimed)
        elif lw and all(t.window for t in traces):
            alone.append(log)
        else:
            undecided.append(log)
    if len(traces) == 1 and len(undecided) == 1 and _frameworks_agree(undecided[0], traces[0]):
        log = undecided.pop()
        traces[0].members.extend(log.members)
        traces[0].untimed.extend(
            [*log.untimed, *((m.source.path.name, "being the only logs beside the only traces")
                             for m in log.members if not m.window)]
        )
    if traces and (alone or undecided):
        reasons.append("logs that belong to no trace capture given")
    return [*traces, *alone, *undecided]


def _frameworks_agree(log: Group, traces: Group) -> bool:
    stated = {m.framework for m in traces.members if m.framework}
    return (
        not stated
        or bool(stated & {m.framework for m in log.members if m.framework})
        or not any(m.framework for m in log.members)
    )


def group(
    parsed: list[ParsedSource], said: list[Statement] | None = None
) -> tuple[list[Group], list[str]]:
    """The runs in ``parsed`` (copies dropped), in time order, and why they were told apart;
    ``said``: each source's :class:`Statement` when its events are not at hand."""
    found = _deduplicate(
        [facts(i, p, said[i] if said else None) for i, p in enumerate(parsed)]
    )
    reasons: list[str] = []
    traces = _cluster([f for f in found if not f.log], _trace_conflict, reasons, _rank_files_tie)
    logs = _cluster([f for f in found if f.log], _log_conflict, reasons)
    runs = _attach_logs(traces, logs, reasons)
    runs.sort(key=lambda g: (g.window is None, g.window or (0, 0), g.indexes[0]))
    return runs, list(dict.fromkeys(reasons))


# --- choosing ----------------------------------------------------------------------------------


def choose(
    parsed: list[ParsedSource],
    choice: str | int | None,
    inputs: Iterable[str | Path],
    said: list[Statement] | None = None,
) -> tuple[list[ParsedSource], list[str]]:
    """The sources of the one run in ``parsed`` (re-indexed from 0), or of the run ``choice``
    names (its number as listed, or a prefix of its files' paths); notes saying what was chosen.
    Raises :class:`RunsError` when there are several and no choice."""
    given = [Path(p) for p in inputs]
    runs, reasons = group(parsed, said)
    listed = [_found(k, g, given) for k, g in enumerate(runs, start=1)]
    notes: list[str] = []
    if choice is None or str(choice).strip() == "":
        if len(runs) > 1:
            raise RunsError(_where(given), listed, reasons)
        picked = runs[0]
    else:
        picked = runs[_pick(str(choice).strip(), listed) - 1]
        if len(runs) > 1:
            notes.append(
                f"run {listed[runs.index(picked)].number} "
                f"of {len(runs)} separate runs in the input "
                f"(--run {choice}); the others are not analysed"
            )
    notes += _roles_note(picked)
    return [_reindexed(parsed[i], k) for k, i in enumerate(picked.indexes)], notes


def _roles_note(g: Group) -> list[str]:
    """What joined the profiling windows of several roles into one run, and what their ranks
    are, where their windows lie apart (they joined by their roles, not by overlapping)."""
    roles = g.roles
    gap = _unrecorded_ns([m.window for m in g.members if m.window])
    if not roles or gap <= WINDOW_SLACK_NS:
        return []
    each = "; ".join(
        f"{folder_role(ms[0].source.path)} ({stage}, ranks {spans(sorted(_ranks_of(ms)))})"
        for stage, ms in roles.items()
    )
    places = sorted({PLACES[role_place(ms[0].source.path)] for ms in roles.values()})
    return [
        f"one run of {len(roles)} roles' profiling windows: {each}. Tied by their role "
        f"{' and '.join(places)} in one profiler folder and one Kineto time base (a "
        "quarter's: on its own no evidence), within 1 h; a rank is the number each role's "
        "world gives it, taken as one "
        f"device that each role uses in turn. {_duration(gap / 1e9)} between the windows was "
        "recorded by no profiler: a figure over the run's whole window counts it"
    ]


PLACES = {"file-name prefix": "file-name prefixes", "folder": "folders"}
""":func:`role_place`'s words, as the roles note says them of several roles."""


def _unrecorded_ns(windows: list[tuple[int, int]]) -> int:
    """The time between ``windows`` that none of them covers, from the first start to the last
    end."""
    gap, reach = 0, None
    for start, end in sorted(windows):
        if reach is not None and start > reach:
            gap += start - reach
        reach = end if reach is None else max(reach, end)
    return gap


def _ranks_of(members: list[Facts]) -> set[int]:
    return {r for m in members for r in m.ranks}


def _pick(choice: str, listed: list[FoundRun]) -> int:
    if choice.isdigit():
        if 1 <= int(choice) <= len(listed):
            return int(choice)
        held = "1 run (1)" if len(listed) == 1 else f"{len(listed)} runs (1-{len(listed)})"
        raise InputError(
            "--run", f"no run {choice}: the input holds {held}; give one of those numbers"
        )
    prefix = _norm(Path(choice))
    hits = [
        r.number
        for r in listed
        if any(_norm(p).startswith(prefix) or str(p).startswith(choice) for p in r.paths)
    ] or [r.number for r in listed if any(p.name.startswith(choice) for p in r.paths)]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise InputError("--run", f"no run has a file under {choice!r} (runs 1-{len(listed)})")
    raise InputError(
        "--run",
        f"{choice!r} matches runs {', '.join(map(str, hits))}: give a longer prefix or the number",
    )


def _norm(path: Path) -> str:
    return os.path.abspath(path)


def _reindexed(parsed: ParsedSource, index: int) -> ParsedSource:
    """The source as the ``index``-th of its run (events' and metrics' ``source`` column)."""
    column = pl.lit(index, dtype=pl.UInt32).alias("source")
    return replace(
        parsed,
        events=parsed.events.with_columns(column),
        metrics=parsed.metrics.with_columns(column),
    )


# --- listing -----------------------------------------------------------------------------------


def _where(inputs: list[Path]) -> str:
    return str(inputs[0]) if len(inputs) == 1 else f"{inputs[0]} (+{len(inputs) - 1} more inputs)"


def _found(number: int, g: Group, inputs: list[Path]) -> FoundRun:
    paths = [m.source.path for m in sorted(g.members, key=lambda m: m.index)]
    return FoundRun(number, g.indexes, paths, _summary(g, paths, inputs))


def _summary(g: Group, paths: list[Path], inputs: list[Path]) -> str:
    root = _common_root(inputs)
    shown = [_relative(p, root) for p in paths[:LISTED_FILES]]
    files = ", ".join(shown) + (
        f" (+{len(paths) - LISTED_FILES} more)" if len(paths) > LISTED_FILES else ""
    )
    roles = ", ".join(g.roles) if _roles_note(g) else ""
    facts_ = [_formats(g), _ranks(g), _frameworks(g), _when(g), _ties(g),
              f"profiling windows of roles {roles}" if roles else ""]
    return f"{files}: " + "; ".join(f for f in facts_ if f)


def _common_root(inputs: list[Path]) -> Path:
    dirs = [_norm(p if p.is_dir() else p.parent) for p in inputs]
    return Path(os.path.commonpath(dirs)) if dirs else Path(".")


def _relative(path: Path, root: Path) -> str:
    try:
        return str(Path(_norm(path)).relative_to(root))
    except ValueError:
        return str(path)


def _formats(g: Group) -> str:
    counts: dict[str, int] = {}
    for m in g.members:
        counts[m.source.format] = counts.get(m.source.format, 0) + 1
    return ", ".join(f"{n} {fmt}" if n > 1 else fmt for fmt, n in counts.items())


def _ranks(g: Group) -> str:
    ranks = sorted({r for m in g.members for r in m.ranks})
    traces = [m for m in g.members if not m.log]
    if not traces:
        return ""
    if not ranks:
        return "no rank stated"
    return ("rank " if len(ranks) == 1 else "ranks ") + spans(ranks)


def _frameworks(g: Group) -> str:
    logs = sorted({m.framework for m in g.members if m.log and m.framework})
    return f"{'/'.join(logs)} log" if logs else ""


def _when(g: Group) -> str:
    window = g.window
    if window is None:
        return "no wall-clock time"
    approx = "~" if all(m.log for m in g.members if m.window) else ""
    start = datetime.fromtimestamp(window[0] / 1e9, tz=timezone.utc)
    return f"{approx}{start:%Y-%m-%d %H:%M:%S} UTC for {_duration((window[1] - window[0]) / 1e9)}"


def _ties(g: Group) -> str:
    """What joined the members that have no wall clock (their time says nothing)."""
    if not g.untimed:
        return ""
    name, how = g.untimed[0]
    more = f" (+{len(g.untimed) - 1} more)" if len(g.untimed) > 1 else ""
    return f"no wall clock: {name} grouped by {how}{more}"


def _duration(seconds: float) -> str:
    if seconds < 1e-3:
        return duration(seconds * 1e9)
    if seconds < 60:
        return f"{seconds:.3g} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
