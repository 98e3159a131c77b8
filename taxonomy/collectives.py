"""Collective → parallelism dimension: the rules of docs/taxonomy.md ("Collective →
dimension") as data and mechanism.

The rules live in ``taxonomy/collectives.toml`` (a user file with the same tables is put in
front of them). Four ways to name a collective's dimension, tried in order by the classifier:

1. the process group's description (Megatron-Core ``parallel_state`` names, DeviceMesh
   ``mesh_<dim>``, ``default_pg``) — :func:`description_dims`;
2. a group whose ranks lie in both pools (rollout and train) is ``weight_sync`` —
   :func:`spans_pools`;
3. the rank layout: Megatron's order tp-cp-ep-dp-pp (tensor-parallel neighbours adjacent) or
   the one the user gives (``--layout``) — :func:`layout_dims`;
4. kernel-name and pattern rules (collective kind, the stage it runs in, its size) —
   :func:`kernel_dims`, :func:`pattern_dim`.

Which names are communication at all beyond what the parsers know (NCCL, c10d, gloo) is the
communication-family table ``taxonomy/comm_families.toml`` (DeepEP, custom and quick
all-reduce, symmetric memory, MSCCL++, NVSHMEM, RCCL, HCCL, …): :func:`load_families`,
:func:`family_frame`; a family may also name the dimension its calls run along when no process
group is recorded (DeepEP → ep, an engine's custom all-reduce → tp).

Everything works on unique group descriptions, unique group rank lists and unique kernel names,
so the cost does not grow with the number of events.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from parsers.events import COLLECTIVES
from parsers.nccl import canonical_coll

from .tomlfile import read_toml, regex_problem
from .vocab import DIM, DIMENSIONS, STAGE_NAMES

RULES_PATH = Path(__file__).with_name("collectives.toml")
FAMILIES_PATH = Path(__file__).with_name("comm_families.toml")
FROM_NAME = "from_name"
"""A family rule's ``coll`` that reads the kind from the name (capture group 1)."""
GROUPINGS: tuple[str, ...] = ("process_group", "own")
FAMILY_KINDS: tuple[str, ...] = ("kernel", "annotation", "cpu_op")
LAYOUT_DIMS: tuple[str, ...] = ("tp", "cp", "ep", "dp", "pp")
MEGATRON_ORDER: tuple[str, ...] = LAYOUT_DIMS


MODEL_PARALLEL = ("fsdp", "tp", "pp", "sp", "cp", "ep", "unknown")
"""Dimensions beside which the world group is not the data-parallel group."""


def world_is_dp(dims: Iterable[str], pools: int) -> bool:
    """Whether a run's world group is its data-parallel group: its ranks are one pool and no
    collective names another parallel dimension (trl_grpo's 2 ranks of pure DP; HTA's
    nccl_data, whose only group is ``default_pg``). Compare and the findings both read it."""
    return pools == 1 and not set(dims) & set(MODEL_PARALLEL)


class CollectiveRulesError(ValueError):
    """A collective rules file or layout that cannot be used; the message names it."""


@dataclass(frozen=True)
class DimRule:
    kind: str
    index: int
    dim: str
    match: str | None = None
    coll: tuple[str, ...] = ()
    stage: tuple[str, ...] = ()
    min_bytes: int | None = None
    max_bytes: int | None = None
    note: str = ""
    origin: str = "builtin"

    @property
    def id(self) -> str:
        return (
            f"{self.kind}:{self.index}"
            if self.origin == "builtin"
            else f"{self.origin}:{self.kind}:{self.index}"
        )


@dataclass(frozen=True)
class Layout:
    """Degrees of the training layout and the order ranks are laid out in (fastest first).

    Degrees left out are inferred (:func:`infer_layout`) or taken as 1; ``dp`` fills what the
    others leave of the pool."""

    order: tuple[str, ...] = MEGATRON_ORDER
    degrees: Mapping[str, int] = field(default_factory=dict)
    given: bool = False

    def describe(self) -> str:
        parts = [f"{d}={self.degrees[d]}" for d in self.order if d in self.degrees]
        return f"order {'-'.join(self.order)}" + (f", {', '.join(parts)}" if parts else "")


@dataclass(frozen=True)
class CollectiveRules:
    descriptions: tuple[DimRule, ...]
    kernels: tuple[DimRule, ...]
    patterns: tuple[DimRule, ...]
    layout: Layout
    layout_note: str = ""
    paths: tuple[str, ...] = ()
    experts: str = ""
    """Kernel or annotation names that show a run has experts (``[evidence] experts``): without
    one, a pattern-only ``ep`` all-to-all is ``unknown``."""


def load_rules(user: str | Path | None = None, path: Path = RULES_PATH) -> CollectiveRules:
    """The built-in rules, with a user file's rules (same tables) tried first."""
    base = _rules(path, _read(path), "builtin")
    if user is None:
        return base
    extra = _rules(Path(user), _read(Path(user)), "user")
    return CollectiveRules(
        descriptions=extra.descriptions + base.descriptions,
        kernels=extra.kernels + base.kernels,
        patterns=extra.patterns + base.patterns,
        layout=extra.layout if extra.layout.given else base.layout,
        layout_note=base.layout_note,
        paths=(*base.paths, *extra.paths),
        experts=extra.experts or base.experts,
    )


def _read(path: Path) -> dict[str, Any]:
    return read_toml(path, lambda p, problem: CollectiveRulesError(f"{p}: {problem}"))


def _rules(path: Path, data: dict[str, Any], origin: str) -> CollectiveRules:
    def table(kind: str) -> tuple[DimRule, ...]:
        return tuple(
            _rule(path, kind, i, raw, origin) for i, raw in enumerate(data.get(kind, []), start=1)
        )

    raw_layout = data.get("layout", {})
    layout = Layout()
    if raw_layout:
        try:
            layout = parse_layout(str(raw_layout.get("order", "")) or "-".join(MEGATRON_ORDER))
        except CollectiveRulesError as exc:
            raise CollectiveRulesError(f"{path}: [layout]: {exc}") from None
        layout = Layout(
            layout.order,
            {k: int(v) for k, v in raw_layout.items() if k in LAYOUT_DIMS},
            given=origin == "user",
        )
    return CollectiveRules(
        descriptions=table("description"), kernels=table("kernel"), patterns=table("pattern"),
        layout=layout, layout_note=str(raw_layout.get("note", "")), paths=(str(path),),
        experts=_regex(path, "[evidence] experts", data.get("evidence", {}).get("experts", "")),
    )


def _regex(path: Path, where: str, text: Any) -> str:
    """``text`` as a regex polars can run, or an error naming the file and the table."""
    if not isinstance(text, str):
        raise CollectiveRulesError(f"{path}: {where}: a regex string, not {text!r}")
    problem = regex_problem(text) if text else None
    if problem:
        raise CollectiveRulesError(f"{path}: {where}: not a regex: {problem}")
    return text


def _rule(path: Path, kind: str, index: int, raw: Any, origin: str) -> DimRule:
    where = f"{path}: {kind} rule {index}"
    if not isinstance(raw, dict) or "dim" not in raw:
        raise CollectiveRulesError(f"{where}: needs a dim")
    dim = str(raw["dim"])
    if dim not in DIMENSIONS:
        raise CollectiveRulesError(f"{where}: unknown dim {dim!r} (one of {', '.join(DIMENSIONS)})")
    match = raw.get("match")
    if kind in ("description", "kernel") and not match:
        raise CollectiveRulesError(f"{where}: needs a match regex")
    problem = None if match is None else regex_problem(str(match))
    if problem is not None:
        raise CollectiveRulesError(f"{where}: bad regex {match!r} ({problem})")
    stages = tuple(str(s) for s in raw.get("stage", []))
    bad = [s for s in stages if s not in STAGE_NAMES]
    if bad:
        raise CollectiveRulesError(f"{where}: unknown stage(s) {bad}")
    return DimRule(
        kind=kind,
        index=index,
        dim=dim,
        match=None if match is None else str(match),
        coll=tuple(str(c) for c in raw.get("coll", [])),
        stage=stages,
        min_bytes=raw.get("min_bytes"),
        max_bytes=raw.get("max_bytes"),
        note=str(raw.get("note", "")),
        origin=origin,
    )


# --- layout ---------------------------------------------------------------------------------


def parse_layout(text: str) -> Layout:
    """``--layout`` values: an order (``tp-cp-ep-dp-pp``), degrees (``tp=2,pp=4``), or both
    (``tp-dp-pp,tp=2,pp=2``)."""
    order: tuple[str, ...] = MEGATRON_ORDER
    degrees: dict[str, int] = {}
    for part in (p.strip() for p in re.split(r"[,\s]+", text.strip()) if p.strip()):
        if "=" in part:
            key, _, value = part.partition("=")
            key = key.strip().lower()
            if key not in LAYOUT_DIMS or not value.strip().isdigit() or int(value) < 1:
                raise CollectiveRulesError(
                    f"bad layout degree {part!r} (use e.g. tp=2 with one of "
                    f"{', '.join(LAYOUT_DIMS)})"
                )
            degrees[key] = int(value)
        else:
            dims = tuple(d.strip().lower() for d in part.split("-"))
            if sorted(dims) != sorted(set(dims)) or not set(dims) <= set(LAYOUT_DIMS):
                raise CollectiveRulesError(
                    f"bad layout order {part!r} (a dash-separated order of "
                    f"{', '.join(LAYOUT_DIMS)})"
                )
            order = dims + tuple(d for d in MEGATRON_ORDER if d not in dims)
    return Layout(order, degrees, given=True)


def _ranks(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _stride(ranks: Sequence[int]) -> int | None:
    steps = {b - a for a, b in itertools.pairwise(ranks)}
    return steps.pop() if len(steps) == 1 else None


def infer_layout(known: Iterable[tuple[str, str]], layout: Layout, pool_size: int) -> Layout:
    """Fill degrees the layout lacks from groups whose dimension is already known
    (``(dim, pg_ranks)`` pairs, e.g. named by their description)."""
    degrees = dict(layout.degrees)
    for dim, ranks in known:
        if dim in LAYOUT_DIMS and dim not in degrees:
            size = len(_ranks(ranks))
            if 1 < size <= pool_size:
                degrees[dim] = size
    return Layout(layout.order, degrees, layout.given)


def has_degrees(layout: Layout, pool_size: int) -> bool:
    """Whether the layout's degrees describe a pool of this size (else only the rank pattern
    is read, see :func:`layout_dims`)."""
    return _complete(layout, pool_size) is not None


def layout_dims(groups: Sequence[str], pool: Sequence[int], layout: Layout) -> list[str | None]:
    """The dimension each group (canonical ``pg_ranks``) runs along in ``pool`` (sorted ranks
    laid out in ``layout.order``); None where the layout does not explain the group.

    Without degrees the layout still says something: the whole pool is data parallel, a group
    of consecutive ranks runs along the fastest dimension of the order (tensor parallel in
    Megatron's), a group of evenly strided ranks is data parallel."""
    index = {r: i for i, r in enumerate(sorted(pool))}
    n = len(index)
    degrees = _complete(layout, n)
    out: list[str | None] = []
    for text in groups:
        ranks = sorted(_ranks(text))
        if len(ranks) < 2 or any(r not in index for r in ranks):
            out.append(None)
            continue
        positions = [index[r] for r in ranks]
        if degrees is not None:
            out.append(_along(positions, layout.order, degrees))
        elif len(ranks) == n:
            out.append("dp")
        else:
            stride = _stride(positions)
            out.append(None if stride is None else (layout.order[0] if stride == 1 else "dp"))
    return out


def _complete(layout: Layout, n: int) -> dict[str, int] | None:
    known = {d: v for d, v in layout.degrees.items() if v > 1}
    if not known:
        return None
    degrees = {d: layout.degrees.get(d, 1) for d in LAYOUT_DIMS}
    if "dp" not in layout.degrees:
        rest = math.prod(v for d, v in degrees.items() if d != "dp")
        degrees["dp"] = max(1, n // rest) if rest else 1
    return degrees if math.prod(degrees.values()) == n else None


def _along(positions: list[int], order: tuple[str, ...], degrees: dict[str, int]) -> str | None:
    coords = []
    for p in positions:
        c = {}
        for d in order:
            c[d] = p % degrees[d]
            p //= degrees[d]
        coords.append(c)
    varying = {d for d in order if len({c[d] for c in coords}) > 1}
    size = len(positions)
    for dim in ("tp", "cp", "ep", "pp"):
        if varying == {dim} and size == degrees[dim]:
            return dim
    if (
        varying <= {"dp", "ep"}
        and "dp" in varying
        and size == degrees["dp"] * (degrees["ep"] if "ep" in varying else 1)
    ):
        return "dp"
    return None


# --- descriptions, kernel names, patterns, pools ---------------------------------------------


def _first_match(values: pl.Series, rules: Sequence[DimRule]) -> pl.Series:
    """Per value, the dim of the first rule whose regex matches (null when none does)."""
    frame = pl.DataFrame({"v": values.cast(pl.String)})
    pick = pl.lit(None, dtype=pl.String)
    for rule in reversed(rules):
        pick = (
            pl.when(pl.col("v").str.contains(rule.match or ""))
            .then(pl.lit(rule.dim))
            .otherwise(pick)
        )
    return frame.select(pl.when(pl.col("v").is_not_null()).then(pick).alias("dim"))["dim"]


def description_dims(descs: pl.Series, rules: CollectiveRules) -> pl.Series:
    """Dimension named by each process-group description (null: the description says nothing,
    e.g. ``undefined`` or a custom name no rule knows)."""
    return _first_match(descs, rules.descriptions)


def kernel_dims(names: pl.Series, rules: CollectiveRules) -> pl.Series:
    return _first_match(names, rules.kernels)


def pattern_dim(
    rules: CollectiveRules, coll: str = "coll", stage: str = "stage", nbytes: str = "bytes"
) -> pl.Expr:
    """Expression over a frame with the collective kind, the stage it ran in and its size: the
    dim of the first pattern rule that holds, else ``unknown``. A size condition never holds
    for a collective of unknown size."""
    pick: pl.Expr = pl.lit("unknown")
    for rule in reversed(rules.patterns):
        cond = pl.lit(True)
        if rule.coll:
            cond = cond & pl.col(coll).cast(pl.String).is_in(list(rule.coll))
        if rule.stage:
            cond = cond & pl.col(stage).cast(pl.String).is_in(list(rule.stage))
        if rule.min_bytes is not None:
            cond = cond & (pl.col(nbytes) >= rule.min_bytes)
        if rule.max_bytes is not None:
            cond = cond & (pl.col(nbytes) < rule.max_bytes)
        pick = pl.when(cond.fill_null(False)).then(pl.lit(rule.dim)).otherwise(pick)
    return pick.cast(DIM)


def spans_pools(groups: Sequence[str | None], pool_of: Mapping[int, str]) -> list[bool]:
    """Whether each group holds ranks of both the rollout and the train pool."""
    out = []
    for text in groups:
        pools = {pool_of.get(r) for r in _ranks(text)} if text else set()
        out.append({"rollout", "train"} <= pools)
    return out


def rules_frame(rules: CollectiveRules | None = None) -> pl.DataFrame:
    """Every rule, for printing (``rlperf taxonomy``) and documentation."""
    rules = rules or load_rules()
    rows = [
        {
            "rule": r.id,
            "kind": r.kind,
            "match": r.match,
            "coll": ", ".join(r.coll) or None,
            "stage": ", ".join(r.stage) or None,
            "min_bytes": r.min_bytes,
            "max_bytes": r.max_bytes,
            "dim": r.dim,
            "note": r.note,
        }
        for r in (*rules.descriptions, *rules.kernels, *rules.patterns)
    ]
    return pl.DataFrame(
        rows,
        schema={
            "rule": pl.String,
            "kind": pl.String,
            "match": pl.String,
            "coll": pl.String,
            "stage": pl.String,
            "min_bytes": pl.Int64,
            "max_bytes": pl.Int64,
            "dim": pl.String,
            "note": pl.String,
        },
    )


# --- communication families -------------------------------------------------------------------


@dataclass(frozen=True)
class FamilyRule:
    match: str
    coll: str
    """A collective kind, or :data:`FROM_NAME`."""


@dataclass(frozen=True)
class Family:
    """One communication library's kernels (or host ranges): how to know them, their kind, and
    the dimension they run along when no process group is recorded."""

    name: str
    library: str
    rules: tuple[FamilyRule, ...]
    dim: str | None = None
    group: str = "process_group"
    """``own``: the library's own communicator, its ungrouped calls matched only with each
    other; ``process_group``: matched with every ungrouped call of their kind."""
    on: tuple[str, ...] = ("kernel",)
    kinds: Mapping[str, str] = field(default_factory=dict)
    note: str = ""
    busbw: str = ""
    examples: tuple[str, ...] = ()
    not_examples: tuple[str, ...] = ()
    origin: str = "builtin"


def load_families(
    user: str | Path | None = None, path: Path = FAMILIES_PATH
) -> tuple[Family, ...]:
    """The built-in families, with a user file's ``[[family]]`` tables (the same file as the
    collective rules) tried first."""
    base = _families(path, _read(path), "builtin")
    if user is None:
        return base
    return _families(Path(user), _read(Path(user)), "user") + base


def _families(path: Path, data: dict[str, Any], origin: str) -> tuple[Family, ...]:
    return tuple(
        _family(f"{path}: family {i}", raw, origin)
        for i, raw in enumerate(data.get("family", []), start=1)
    )


def _family(where: str, raw: Any, origin: str) -> Family:
    if not isinstance(raw, dict) or not raw.get("name") or not raw.get("rule"):
        raise CollectiveRulesError(f"{where}: needs a name and at least one [[family.rule]]")
    where = f"{where} ({raw['name']})"
    dim = raw.get("dim")
    if dim is not None and dim not in DIMENSIONS:
        raise CollectiveRulesError(f"{where}: unknown dim {dim!r} (one of {', '.join(DIMENSIONS)})")
    group = str(raw.get("group", "process_group"))
    on = tuple(str(k) for k in raw.get("on", ["kernel"]))
    kinds = {str(k).lower(): str(v) for k, v in dict(raw.get("kinds", {})).items()}
    if group not in GROUPINGS or not set(on) <= set(FAMILY_KINDS):
        raise CollectiveRulesError(
            f"{where}: group is one of {', '.join(GROUPINGS)}, on a list of "
            f"{', '.join(FAMILY_KINDS)}"
        )
    bad = sorted(set(kinds.values()) - set(COLLECTIVES))
    if bad:
        raise CollectiveRulesError(f"{where}: unknown collective kind(s) {bad} in kinds")
    return Family(
        name=str(raw["name"]),
        library=str(raw.get("library", raw["name"])),
        rules=tuple(_family_rule(f"{where}: rule {i}", r) for i, r in enumerate(raw["rule"], 1)),
        dim=None if dim is None else str(dim),
        group=group,
        on=on,
        kinds=kinds,
        note=str(raw.get("note", "")),
        busbw=str(raw.get("busbw", "")),
        examples=tuple(str(x) for x in raw.get("examples", [])),
        not_examples=tuple(str(x) for x in raw.get("not_examples", [])),
        origin=origin,
    )


def _family_rule(where: str, raw: Any) -> FamilyRule:
    match = raw.get("match") if isinstance(raw, dict) else None
    if not match:
        raise CollectiveRulesError(f"{where}: needs a match regex")
    problem = regex_problem(str(match))
    if problem is not None:
        raise CollectiveRulesError(f"{where}: bad regex {match!r} ({problem})")
    coll = str(raw.get("coll", ""))
    if coll != FROM_NAME and coll not in COLLECTIVES:
        raise CollectiveRulesError(
            f"{where}: coll is {FROM_NAME!r} or one of {', '.join(COLLECTIVES)}"
        )
    if coll == FROM_NAME and re.compile(str(match)).groups < 1:
        raise CollectiveRulesError(f"{where}: coll {FROM_NAME!r} needs a capture group")
    return FamilyRule(str(match), coll)


def host_kind_keeps_kernel(path: Path = FAMILIES_PATH) -> tuple[str, ...]:
    """Host collective kinds that do not decide the kind of a kernel launched inside them
    (``[host_kind] keeps_kernel`` of ``comm_families.toml``): every other kind does."""
    raw = _read(path).get("host_kind", {})
    kept = tuple(str(k) for k in raw.get("keeps_kernel", []))
    bad = sorted(set(kept) - set(COLLECTIVES))
    if bad:
        raise CollectiveRulesError(f"{path}: [host_kind]: unknown collective kind(s) {bad}")
    return kept


FAMILY_SCHEMA: dict[str, pl.DataType] = {
    "name": pl.String(),
    "family": pl.String(),
    "coll": pl.String(),
    "family_dim": pl.String(),
    "own_group": pl.Boolean(),
    "on": pl.List(pl.String()),
}


def family_frame(names: pl.Series, families: Sequence[Family]) -> pl.DataFrame:
    """Per distinct name that some family claims: the family (first match), the collective kind
    and the family's dimension (null when it names none); names no family claims are left out.
    The kind a rule reads from the name is looked up per distinct captured word."""
    rules = [(f, r) for f in families for r in f.rules]
    frame = pl.DataFrame({"name": names.cast(pl.String).unique().drop_nulls()})
    if not rules or frame.height == 0:
        return pl.DataFrame(schema=FAMILY_SCHEMA)
    pick: pl.Expr = pl.lit(None, dtype=pl.Int32)
    for i in reversed(range(len(rules))):
        pick = pl.when(pl.col("name").str.contains(rules[i][1].match)).then(i).otherwise(pick)
    hit = frame.with_columns(pick.alias("_rule")).filter(pl.col("_rule").is_not_null())
    word: pl.Expr = pl.lit(None, dtype=pl.String)
    for i, (_, rule) in enumerate(rules):
        if rule.coll == FROM_NAME:
            word = pl.when(pl.col("_rule") == i).then(
                pl.col("name").str.extract(rule.match, 1).str.to_lowercase()
            ).otherwise(word)
    hit = hit.with_columns(word.alias("_word"))
    fam = pl.DataFrame(
        {
            "_rule": list(range(len(rules))),
            "family": [f.name for f, _ in rules],
            "_fixed": [None if r.coll == FROM_NAME else r.coll for _, r in rules],
            "family_dim": [f.dim for f, _ in rules],
            "own_group": [f.group == "own" for f, _ in rules],
            "on": [list(f.on) for f, _ in rules],
        },
        schema_overrides={"_rule": pl.Int32, "_fixed": pl.String, "family_dim": pl.String},
    )
    pairs = hit.join(fam, on="_rule").select("family", "_word").unique().drop_nulls()
    kinds = {f.name: f.kinds for f in families}
    read = pl.DataFrame(
        {
            "family": pairs["family"],
            "_word": pairs["_word"],
            "_read": [
                kinds[f].get(w) or canonical_coll(w) or "other"
                for f, w in zip(pairs["family"], pairs["_word"], strict=True)
            ],
        },
        schema={"family": pl.String, "_word": pl.String, "_read": pl.String},
    )
    out = hit.join(fam, on="_rule").join(read, on=["family", "_word"], how="left")
    return out.select(
        "name",
        "family",
        pl.coalesce("_fixed", "_read").alias("coll"),
        "family_dim",
        "own_group",
        "on",
    ).select(pl.col(c).cast(t) for c, t in FAMILY_SCHEMA.items())


def families_frame(families: Sequence[Family] | None = None) -> pl.DataFrame:
    """Every family, for printing and documentation: library, kinds, dimension, grouping."""
    families = families if families is not None else load_families()
    return pl.DataFrame(
        [
            {
                "family": f.name,
                "library": f.library,
                "kinds": ", ".join(
                    dict.fromkeys(
                        r.coll if r.coll != FROM_NAME else "from name" for r in f.rules
                    )
                ),
                "dim": f.dim,
                "group": f.group,
                "on": ", ".join(f.on),
                "note": f.note,
                "busbw": f.busbw,
            }
            for f in families
        ],
        schema={c: pl.String for c in
                ("family", "library", "kinds", "dim", "group", "on", "note", "busbw")},
    )
