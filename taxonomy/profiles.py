"""Framework profiles: ordered name rules (log keys, trace ranges) → stage, role and relation.

Profiles are data, one TOML file per framework under ``taxonomy/profiles/`` (format in
``docs/profiles.md``). This module loads them (plus an optional user rules file whose rules take
priority), picks the profile that fits a run from the names it contains, chooses a framework
version when rules depend on one, and classifies unique names column-wise (polars regex, so the
Rust regex dialect: no look-around, no back-references).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from .tomlfile import check_regexes, read_toml, regex_problem
from .vocab import ROLE, ROLES, STAGE, STAGE_NAMES

PROFILE_DIR = Path(__file__).with_name("profiles")
GENERIC = "generic"
SOURCES: tuple[str, ...] = ("log", "trace", "any")
RELATIONS: tuple[str, ...] = ("stage", "step", "part", "aux", "unknown")
RELATION = pl.Enum(list(RELATIONS))

CLASSES_SCHEMA = pl.Schema({
    "name": pl.String(),
    "stage": STAGE,
    "role": ROLE,
    "relation": RELATION,
    "parent": pl.String(),
    "in_step": pl.Boolean(),
    "covers": pl.List(pl.String()),
    "hides": pl.List(pl.String()),
    "rule": pl.String(),
})
"""What :func:`classify` returns: one row per unique name. ``covers`` lists the stages a
composite timer spans without splitting them (``stage`` is the first of them); ``hides`` the
stages that a version folds into this timer (verl weight sync inside ``gen``)."""


class ProfileError(ValueError):
    """A profile or user rules file that cannot be used; the message names the file."""


@dataclass(frozen=True)
class Rule:
    profile: str
    index: int
    match: str
    source: str
    stage: str
    relation: str
    role: str | None = None
    parent: str | None = None
    in_step: bool = True
    versions: str | None = None
    covers: tuple[str, ...] = ()
    hides: tuple[str, ...] = ()
    note: str = ""

    @property
    def id(self) -> str:
        return f"{self.profile}:{self.index}"


@dataclass(frozen=True)
class Evidence:
    """One way to tell the framework version from a log: all given conditions must hold."""

    version: str
    reason: str
    names: str | None = None
    absent: str | None = None
    meta: str | None = None
    equals: Any = None


@dataclass(frozen=True)
class Profile:
    name: str
    title: str
    versions: str
    detect: tuple[str, ...]
    rules: tuple[Rule, ...]
    frameworks: tuple[str, ...] = ()
    default_version: str | None = None
    evidence: tuple[Evidence, ...] = ()
    metrics: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    notes: str = ""
    path: str = ""
    engine: bool = False
    """An inference engine (vLLM, SGLang), not an RL framework: detected from its Python stack and
    operator names too, and a trace of it alone is a rollout-only run."""


@dataclass(frozen=True)
class Detection:
    """The profile chosen for a run, the version assumed, and why."""

    profile: Profile
    version: str | None
    reason: str
    scores: Mapping[str, int]

    @property
    def version_assumed(self) -> str:
        shown = self.version or "any"
        return f"{self.profile.name} {shown}: {self.reason}"


def load_profiles(
    user_rules: str | Path | None = None, directory: Path = PROFILE_DIR
) -> dict[str, Profile]:
    """All profiles by name; a user rules file's rules are put first in the profile it names
    (``[profile] name = …``) or, without one, in every profile.

    Memoised on the files' identity (path, size, mtime): one analysis asks for them from several
    steps, and checking every rule's regex costs a polars call each."""
    paths = sorted(directory.glob("*.toml"))
    key = (str(directory), _identity(paths), user_rules and _identity([Path(user_rules)]))
    if key not in _LOADED:
        _LOADED[key] = _load(paths, directory, user_rules)
    return dict(_LOADED[key])


_LOADED: dict[tuple[Any, ...], dict[str, Profile]] = {}


def _identity(paths: list[Path]) -> tuple[tuple[str, int, int], ...]:
    stats = [(p, p.stat()) if p.exists() else (p, None) for p in paths]
    return tuple((str(p), s.st_size if s else -1, s.st_mtime_ns if s else -1) for p, s in stats)


def _load(
    paths: list[Path], directory: Path, user_rules: str | Path | None
) -> dict[str, Profile]:
    profiles = {}
    files = [(path, _read(path)) for path in paths]
    check_regexes(pattern for _, data in files for pattern in _patterns(data))
    for path, data in files:
        profile = _profile(path, data)
        if profile.name in profiles:
            raise ProfileError(f"{path}: profile name {profile.name!r} is used twice")
        profiles[profile.name] = profile
    if GENERIC not in profiles:
        raise ProfileError(f"{directory}: the '{GENERIC}' fallback profile is missing")
    if user_rules is not None:
        profiles = _merge_user(profiles, Path(user_rules))
    return profiles


def _patterns(data: dict[str, Any]) -> Iterator[str]:
    """The regexes a profile file holds, where they are where :func:`_profile` reads them."""
    head = data.get("profile")
    head = head if isinstance(head, dict) else {}

    def listed(value: Any) -> list[Any]:
        return value if isinstance(value, list) else []

    yield from (str(x) for x in listed(head.get("detect")))
    for table in listed(data.get("rules")) + listed(head.get("version_evidence")):
        if isinstance(table, dict):
            yield from (str(table[k]) for k in ("match", "names", "absent") if table.get(k))


def _read(path: Path) -> dict[str, Any]:
    return read_toml(path, lambda p, problem: ProfileError(f"{p}: {problem}"))


def _profile(path: Path, data: dict[str, Any]) -> Profile:
    head = data.get("profile")
    if not isinstance(head, dict) or not head.get("name"):
        raise ProfileError(f"{path}: needs a [profile] table with a name")
    name = str(head["name"])
    detect = tuple(str(x) for x in head.get("detect", []))
    for pattern in detect:
        _check_regex(path, pattern, "detect")
    rules = tuple(_rule(path, name, i, r) for i, r in enumerate(data.get("rules", []), start=1))
    evidence = tuple(_evidence(path, e) for e in head.get("version_evidence", []))
    metrics = {
        str(k): tuple(str(x) for x in (v if isinstance(v, list) else [v]))
        for k, v in data.get("metrics", {}).items()
    }
    return Profile(
        name=name,
        title=str(head.get("title", name)),
        versions=str(head.get("versions", "")),
        detect=detect,
        rules=rules,
        frameworks=tuple(str(x) for x in head.get("frameworks", [name])),
        default_version=head.get("default_version"),
        evidence=evidence,
        metrics=metrics,
        notes=str(head.get("notes", "")),
        path=str(path),
        engine=bool(head.get("engine", False)),
    )


def _rule(path: Path, profile: str, index: int, raw: Any) -> Rule:
    where = f"{path}: rule {index}"
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: not a table")
    for key in ("match", "stage", "relation"):
        if key not in raw:
            raise ProfileError(f"{where}: '{key}' is required")
    stage = str(raw["stage"])
    if stage not in STAGE_NAMES:
        raise ProfileError(f"{where}: unknown stage {stage!r} (one of {', '.join(STAGE_NAMES)})")
    relation = str(raw["relation"])
    if relation not in RELATIONS[:-1]:
        raise ProfileError(f"{where}: unknown relation {relation!r} (stage, step, part or aux)")
    source = str(raw.get("source", "any"))
    if source not in SOURCES:
        raise ProfileError(f"{where}: unknown source {source!r} (log, trace or any)")
    role = raw.get("role")
    if role is not None and role not in ROLES:
        raise ProfileError(f"{where}: unknown role {role!r} (one of {', '.join(ROLES)})")
    if relation == "part" and not raw.get("parent"):
        raise ProfileError(f"{where}: a part needs its parent")
    for key in ("covers", "hides"):
        for value in raw.get(key, []):
            if value not in STAGE_NAMES:
                raise ProfileError(f"{where}: unknown stage {value!r} in {key}")
    versions = raw.get("versions")
    if versions is not None:
        try:
            _spec(str(versions))
        except ValueError as exc:
            raise ProfileError(f"{where}: {exc}") from None
    _check_regex(path, str(raw["match"]), f"rule {index}")
    return Rule(
        profile=profile,
        index=index,
        match=str(raw["match"]),
        source=source,
        stage=stage,
        relation=relation,
        role=role,
        parent=raw.get("parent"),
        in_step=bool(raw.get("in_step", True)),
        versions=None if versions is None else str(versions),
        covers=tuple(raw.get("covers", [])),
        hides=tuple(raw.get("hides", [])),
        note=str(raw.get("note", "")),
    )


def _evidence(path: Path, raw: Any) -> Evidence:
    if not isinstance(raw, dict) or "version" not in raw:
        raise ProfileError(f"{path}: version_evidence entries need a version")
    for key in ("names", "absent"):
        if raw.get(key):
            _check_regex(path, str(raw[key]), "version_evidence")
    return Evidence(
        version=str(raw["version"]), reason=str(raw.get("reason", "")), names=raw.get("names"),
        absent=raw.get("absent"), meta=raw.get("meta"), equals=raw.get("equals"),
    )


def _check_regex(path: Path, pattern: str, where: str) -> None:
    problem = regex_problem(pattern)
    if problem is not None:
        raise ProfileError(f"{path}: {where}: bad regex {pattern!r} ({problem})")


def _merge_user(profiles: dict[str, Profile], path: Path) -> dict[str, Profile]:
    data = _read(path)
    target = data.get("profile", {}).get("name") if isinstance(data.get("profile"), dict) else None
    if target is not None and target not in profiles:
        raise ProfileError(
            f"{path}: names profile {target!r}, which does not exist "
            f"({', '.join(sorted(profiles))})"
        )
    user = tuple(_rule(path, "user", i, r) for i, r in enumerate(data.get("rules", []), start=1))
    if not user:
        raise ProfileError(f"{path}: no [[rules]] in the user rules file")
    merged = {}
    for name, profile in profiles.items():
        if target is None or name == target:
            profile = Profile(**{**profile.__dict__, "rules": user + profile.rules})
        merged[name] = profile
    return merged


# --- versions ------------------------------------------------------------------------------


COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "==": operator.eq,
    "=": operator.eq,
}


def _version(text: str) -> tuple[int, ...]:
    parts = re.findall(r"\d+", text)
    if not parts:
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(p) for p in parts)


def _spec(spec: str) -> list[tuple[str, tuple[int, ...]]]:
    """``">=0.2,<0.6"`` → [(">=", (0, 2)), ("<", (0, 6))]."""
    out = []
    for part in spec.split(","):
        match = re.fullmatch(r"\s*(>=|<=|==|>|<|=)?\s*v?([\d.]+)\s*", part)
        if not match:
            raise ValueError(f"bad version range {spec!r} (use e.g. '>=0.2,<0.6')")
        out.append((match.group(1) or "==", _version(match.group(2))))
    return out


def version_matches(spec: str | None, version: str | None) -> bool:
    """Whether ``version`` lies in ``spec``; a rule without a range always holds, and a rule with
    one never holds for an unknown version."""
    if spec is None:
        return True
    if version is None:
        return False
    have, bounds = _version(version), _spec(spec)
    width = max(len(have), *(len(v) for _, v in bounds))

    def pad(v: tuple[int, ...]) -> tuple[int, ...]:
        return v + (0,) * (width - len(v))

    return all(COMPARE[op](pad(have), pad(v)) for op, v in bounds)


# --- detection -----------------------------------------------------------------------------


def _unique_names(names: Iterable[str] | pl.Series) -> pl.Series:
    series = names if isinstance(names, pl.Series) else pl.Series(list(names), dtype=pl.String)
    return series.cast(pl.String).drop_nulls().unique()


def detect(
    names: Iterable[str] | pl.Series,
    meta: Mapping[str, Any] | None = None,
    profiles: Mapping[str, Profile] | None = None,
    framework: str | None = None,
) -> Detection:
    """The profile for a run: the framework named by the user or the parser (``meta
    ["framework"]``) when a profile claims it, else the one whose ``detect`` patterns match the
    most names, else ``generic``; plus the version assumed (:func:`assume_version`)."""
    profiles = profiles or load_profiles()
    meta = meta or {}
    unique = _unique_names(names)
    scores = _scores(unique, {n: p for n, p in profiles.items() if n != GENERIC})
    hint = framework or meta.get("framework")
    chosen = None
    if hint:
        chosen = next(
            (p for p in profiles.values() if hint in p.frameworks or hint == p.name), None
        )
    if chosen is None:
        best = max(scores.items(), key=lambda kv: kv[1], default=(GENERIC, 0))
        chosen = profiles[best[0]] if best[1] > 0 else profiles[GENERIC]
    version, reason = assume_version(chosen, unique, meta)
    return Detection(profile=chosen, version=version, reason=reason, scores=scores)


def _scores(unique: pl.Series, profiles: Mapping[str, Profile]) -> dict[str, int]:
    """Per profile, how many of the names each of its ``detect`` patterns matches, summed: one
    polars query for every pattern of every profile."""
    if not unique.len():
        return dict.fromkeys(profiles, 0)
    patterns = list(dict.fromkeys(p for profile in profiles.values() for p in profile.detect))
    counts = pl.DataFrame({"name": unique}).select(
        pl.col("name").str.contains(p).sum().alias(str(i)) for i, p in enumerate(patterns)
    ).row(0) if patterns else ()
    matched = dict(zip(patterns, counts, strict=True))
    return {name: int(sum(matched[p] for p in profile.detect))
            for name, profile in profiles.items()}


def assume_version(
    profile: Profile, names: Iterable[str] | pl.Series, meta: Mapping[str, Any] | None = None
) -> tuple[str | None, str]:
    """The framework version to apply version-dependent rules with: ``meta["framework_version"]``
    when the source states it, else the first ``version_evidence`` entry the names and meta
    satisfy, else the profile's ``default_version``. Returns (version, reason)."""
    meta = meta or {}
    stated = meta.get("framework_version")
    if stated:
        return str(stated), "version stated by the source"
    unique = _unique_names(names)
    for item in profile.evidence:
        if item.names and not (unique.len() and unique.str.contains(item.names).any()):
            continue
        if item.absent and unique.len() and unique.str.contains(item.absent).any():
            continue
        if item.meta is not None and meta.get(item.meta) != item.equals:
            continue
        return item.version, item.reason or "matched version evidence"
    if profile.default_version:
        return str(
            profile.default_version
        ), "no version evidence in the source; the profile's default"
    return None, "the profile has no version-dependent rules"


# --- classification ------------------------------------------------------------------------


def rules_for(
    profile: Profile,
    source: str,
    version: str | None,
    profiles: Mapping[str, Profile] | None = None,
) -> list[Rule]:
    """The rules that apply, in priority order: the profile's (user rules first), then the
    ``generic`` fallback's."""
    if source not in ("log", "trace"):
        raise ValueError(f"source must be 'log' or 'trace', not {source!r}")
    chain = list(profile.rules)
    if profile.name != GENERIC:
        generic = (profiles or load_profiles()).get(GENERIC)
        if generic is not None:
            chain += [r for r in generic.rules if r.profile != "user"]
    return [
        r for r in chain if r.source in (source, "any") and version_matches(r.versions, version)
    ]


def classify(
    names: Iterable[str] | pl.Series,
    source: str,
    profile: Profile | Detection,
    version: str | None = None,
    profiles: Mapping[str, Profile] | None = None,
) -> pl.DataFrame:
    """One row per unique name (see :data:`CLASSES_SCHEMA`); names no rule claims get stage
    ``other`` and relation ``unknown`` and keep their name."""
    if isinstance(profile, Detection):
        version = version if version is not None else profile.version
        profile = profile.profile
    unique = _unique_names(names).sort()
    rules = rules_for(profile, source, version, profiles)
    frame = pl.DataFrame({"name": unique})
    if frame.height == 0:
        return pl.DataFrame(schema=CLASSES_SCHEMA)
    pick = pl.lit(None, dtype=pl.Int32)
    for i, rule in reversed(list(enumerate(rules))):
        pick = (
            pl.when(pl.col("name").str.contains(rule.match))
            .then(pl.lit(i, dtype=pl.Int32))
            .otherwise(pick)
        )
    frame = frame.with_columns(pick.alias("_rule"))
    table = pl.DataFrame(
        {
            "_rule": list(range(len(rules))),
            "stage": [r.stage for r in rules],
            "role": [r.role for r in rules],
            "relation": [r.relation for r in rules],
            "parent": [r.parent for r in rules],
            "in_step": [r.in_step for r in rules],
            "covers": [list(r.covers) or None for r in rules],
            "hides": [list(r.hides) or None for r in rules],
            "rule": [r.id for r in rules],
        },
        schema={"_rule": pl.Int32, "stage": pl.String, "role": pl.String, "relation": pl.String,
                "parent": pl.String, "in_step": pl.Boolean, "covers": pl.List(pl.String),
                "hides": pl.List(pl.String), "rule": pl.String},
    )
    out = frame.join(table, on="_rule", how="left").with_columns(
        pl.col("stage").fill_null("other"),
        pl.col("relation").fill_null("unknown"),
        pl.col("in_step").fill_null(True),
    )
    return out.select(list(CLASSES_SCHEMA)).cast(CLASSES_SCHEMA)


def profiles_frame(profiles: Mapping[str, Profile] | None = None) -> pl.DataFrame:
    """Every rule of every profile, for printing (``rlperf taxonomy``) and documentation."""
    rows = [
        {"profile": p.name, "title": p.title, "rule": r.id, "match": r.match, "source": r.source,
         "stage": r.stage, "role": r.role, "relation": r.relation, "parent": r.parent,
         "in_step": r.in_step, "versions": r.versions, "covers": ", ".join(r.covers) or None,
         "hides": ", ".join(r.hides) or None, "note": r.note}
        for p in (profiles or load_profiles()).values()
        for r in p.rules
    ]
    return pl.DataFrame(rows)
