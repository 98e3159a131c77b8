"""Property tests (hypothesis) over every parser and the interval algebra the analyses share.

Parsers get generated, valid-ish inputs — well-formed documents whose values are drawn from the
whole range a file can hold (huge, negative, fractional, non-finite) — and must either refuse
with the contract's one line or return a table that keeps the event contract; for inputs that
are fully valid they must also keep every event with its exact time. The interval helpers are
checked against a plain-Python oracle: union length, intersection and difference sizes,
busy + idle = window with idle never negative. CI runs them derandomized (the ``ci`` profile in
conftest.py, HYPOTHESIS_PROFILE=ci).
"""

from __future__ import annotations

import json
import re
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import parsers
from analyzer.model import intervals
from parsers import InputError

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
PARSER_RUNS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
INTERVAL_RUNS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

ANY_NUMBER = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 2**63 - 1, 2**63, -(2**63), 1e30, -1e16, 0.5]),
)
"""Every number a file can state."""


def parse_bytes(name: str, data: bytes, fmt: str | None = None) -> parsers.ParsedSource | None:
    """The parsed file, or None when it is refused with the one-line error."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        try:
            source = parsers.parse_file(path, fmt)
        except InputError:
            return None
    parsers.validate(source.events, where=name)
    return source


# --- Kineto --------------------------------------------------------------------------------------

valid_ts = st.integers(0, 10**12)
valid_dur = st.integers(0, 10**7)


@st.composite
def kineto_kernels(draw) -> tuple[dict, list[tuple[int, int]]]:
    """A trace of kernels with their launches; µs integer times relative to baseTimeNanoseconds."""
    base = draw(st.integers(1_600_000_000 * 10**9, 1_900_000_000 * 10**9))
    times = draw(st.lists(st.tuples(valid_ts, valid_dur), min_size=1, max_size=30))
    events = [
        {
            "ph": "X",
            "cat": "kernel",
            "name": f"k{i}",
            "pid": 0,
            "tid": 7,
            "ts": ts,
            "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": i + 1},
        }
        for i, (ts, dur) in enumerate(times)
    ]
    events += [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": ts,
            "dur": 1,
            "args": {"correlation": i + 1},
        }
        for i, (ts, _) in enumerate(times)
    ]
    doc = {
        "schemaVersion": 1,
        "baseTimeNanoseconds": base,
        "traceEvents": draw(st.permutations(events)),
    }
    return doc, [(base + ts * 1000, base + (ts + dur) * 1000) for ts, dur in times]


@PARSER_RUNS
@given(kineto_kernels())
def test_kineto_keeps_every_valid_kernel_at_its_exact_time(case) -> None:
    doc, expected = case
    source = parse_bytes("rank0.pt.trace.json", json.dumps(doc).encode())
    kernels = source.events.filter(pl.col("kind") == "kernel").sort("start_ns", "end_ns")
    assert list(zip(kernels["start_ns"], kernels["end_ns"], strict=True)) == sorted(expected)


@st.composite
def kineto_any_values(draw) -> bytes:
    """A well-formed trace whose times, ids and args take any value a file can hold."""
    value = st.one_of(ANY_NUMBER, st.text(max_size=8), st.none(), st.booleans())
    event = st.fixed_dictionaries(
        {
            "ph": st.sampled_from(["X", "i", "M", "B", "E", "f", "s"]),
            "cat": st.sampled_from(
                ["kernel", "cpu_op", "cuda_runtime", "gpu_memcpy", "user_annotation", "ac2g"]
            ),
            "name": st.sampled_from(
                ["k", "ProfilerStep#1", "aten::mm", "ncclKernel_AllReduce_RING_LL_Sum_float", "x"]
            ),
            "ts": value,
            "dur": value,
            "pid": value,
            "tid": value,
        },
        optional={
            "args": st.dictionaries(
                st.sampled_from(
                    [
                        "correlation",
                        "device",
                        "stream",
                        "External id",
                        "Collective name",
                        "In msg nelems",
                        "Group size",
                    ]
                ),
                value,
            )
        },
    )
    doc = {"traceEvents": draw(st.lists(event, max_size=25))}
    if draw(st.booleans()):
        doc["baseTimeNanoseconds"] = draw(value)
    if draw(st.booleans()):
        doc["distributedInfo"] = {"rank": draw(value), "world_size": draw(value)}
    return json.dumps(doc, allow_nan=True).encode()


@PARSER_RUNS
@given(kineto_any_values())
def test_kineto_any_values_end_in_a_table_or_one_refusal(data: bytes) -> None:
    parse_bytes("rank0.pt.trace.json", data, "kineto")


# --- framework span traces -----------------------------------------------------------------------


@st.composite
def span_trace(draw) -> tuple[bytes, int]:
    """A NeMo-RL style array of complete and begin/end spans (epoch µs)."""
    spans = draw(
        st.lists(
            st.tuples(
                st.integers(1_700_000_000 * 10**6, 1_800_000_000 * 10**6), st.integers(0, 10**8)
            ),
            min_size=1,
            max_size=20,
        )
    )
    events = [
        {"name": "step", "ph": "X", "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": {"step": i}}
        for i, (ts, dur) in enumerate(spans)
    ]
    return json.dumps(
        [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "tracer_name"}}, *events]
    ).encode(), len(spans)


@PARSER_RUNS
@given(span_trace())
def test_span_traces_keep_every_complete_span(case) -> None:
    data, count = case
    source = parse_bytes("trace.json", data, "framework-spans")
    assert source.events.filter(pl.col("kind") == "annotation").height == count


@PARSER_RUNS
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "name": st.sampled_from(["a", "b"]),
                "ph": st.sampled_from(["X", "B", "E", "i", "C"]),
                "ts": ANY_NUMBER,
                "dur": ANY_NUMBER,
                "pid": st.one_of(st.integers(), st.text(max_size=4)),
                "tid": st.integers(-5, 5),
            }
        ),
        max_size=20,
    )
)
def test_span_traces_with_any_values_end_in_a_table_or_one_refusal(events) -> None:
    parse_bytes("trace.json", json.dumps(events, allow_nan=True).encode(), "framework-spans")


# --- nsys SQLite ---------------------------------------------------------------------------------

NSYS = CORPUS / "pipit" / "saxpy-mpi-cuda_nsys_perlmutter0.sqlite"


def _export_with_kernels(rows: list[tuple]) -> bytes:
    """The real saxpy export with its kernel table replaced by ``rows``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.sqlite"
        src = sqlite3.connect(f"{NSYS.resolve().as_uri()}?mode=ro", uri=True)
        db = sqlite3.connect(path)
        src.backup(db)
        src.close()
        template = db.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone()
        cols = [r[1] for r in db.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
        db.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
        for start, end, device, stream in rows:
            row = dict(zip(cols, template, strict=True)) | {
                "start": start,
                "end": end,
                "deviceId": device,
                "streamId": stream,
            }
            db.execute(
                f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({','.join('?' * len(cols))})",
                list(row.values()),
            )
        db.commit()
        db.close()
        return path.read_bytes()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.integers(0, 10**12),
            st.integers(0, 10**9),
            st.sampled_from([0, 1]),
            st.integers(0, 64),
        ),
        min_size=1,
        max_size=15,
    )
)
def test_nsys_keeps_every_valid_kernel(rows) -> None:
    source = parse_bytes(
        "rank0.sqlite",
        _export_with_kernels([(s, s + d, dev, strm) for s, d, dev, strm in rows]),
        "nsys-sqlite",
    )
    kernels = source.events.filter(pl.col("kind") == "kernel")
    assert kernels.height == len(rows)
    assert sorted((kernels["end_ns"] - kernels["start_ns"]).to_list()) == sorted(
        d for _, d, _, _ in rows
    )


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.one_of(
                ANY_NUMBER.filter(lambda v: not isinstance(v, float) or v == v), st.text(max_size=4)
            ),
            st.integers(-(2**63), 2**63 - 1),
            st.one_of(st.integers(-3, 3), st.text(max_size=2)),
            st.integers(-(2**63), 2**63 - 1),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_nsys_any_cell_values_end_in_a_table_or_one_refusal(rows) -> None:
    wide = [
        (s if not isinstance(s, int) or -(2**63) <= s < 2**63 else str(s), e, d, strm)
        for s, e, d, strm in rows
    ]
    parse_bytes("rank0.sqlite", _export_with_kernels(wide), "nsys-sqlite")


# --- nsys stats CSV ------------------------------------------------------------------------------

PPTRACE_HEADER = (
    "Start (ns),End (ns),Duration (ns),DurChild (ns),DurNonChild "
    "(ns),Name,PID,TID,Lvl,NumChild,RangeId,ParentId,RangeStack,NameTree\n"
)


@PARSER_RUNS
@given(
    st.lists(
        st.tuples(
            st.integers(0, 10**15), st.integers(0, 10**10), st.sampled_from(["main", "a", "b b"])
        ),
        min_size=1,
        max_size=30,
    )
)
def test_stats_pushpop_keeps_every_valid_range(rows) -> None:
    body = "".join(
        f"{s},{s + d},{d},0,{d},{n},7,7,0,0,{i + 1},,:{i + 1},{n}\n"
        for i, (s, d, n) in enumerate(rows)
    )
    source = parse_bytes(
        "x_nvtx_pushpop_trace.csv", (PPTRACE_HEADER + body).encode(), "nsys-stats-csv"
    )
    assert source.events.height == len(rows)
    assert sorted(source.events["start_ns"].to_list()) == sorted(s for s, _, _ in rows)


@PARSER_RUNS
@given(
    st.lists(
        st.lists(
            st.one_of(ANY_NUMBER.map(str), st.sampled_from(["", "abc", '"', "1.5"])),
            min_size=14,
            max_size=14,
        ),
        min_size=1,
        max_size=10,
    )
)
def test_stats_pushpop_with_any_cells_ends_in_a_table_or_one_refusal(rows) -> None:
    body = "".join(",".join(r) + "\n" for r in rows)
    parse_bytes("x_nvtx_pushpop_trace.csv", (PPTRACE_HEADER + body).encode(), "nsys-stats-csv")


# --- framework logs ------------------------------------------------------------------------------

NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w.])")
LOG_FILES: dict[str, Path] = {
    "verl-log": CORPUS / "logs" / "verl" / "dstack-configs_ppo-gae_qwen2.5-7b_verl_demo.log",
    "openrlhf-log": FIXTURES / "openrlhf_v0.10_sync.log",
    "trl-log": FIXTURES / "trl_grpo_console.log",
    "nemo-rl-log": FIXTURES / "nemo_rl_grpo_sync.log",
    "slime-log": FIXTURES / "slime_perf.log",
    "areal-log": FIXTURES / "areal_stats.log",
    "roll-log": FIXTURES / "roll_rlvr.log",
    "deepspeed-chat-log": FIXTURES / "deepspeed_chat_now.log",
}
"""One real log per log parser (verl's from the corpus, the others bundled)."""


def _log_head(fmt: str) -> str:
    text = LOG_FILES[fmt].read_text(errors="replace")
    lines = text.splitlines(keepends=True)
    step_lines = [i for i, line in enumerate(lines) if "step" in line.lower()]
    start = max(0, step_lines[len(step_lines) // 2] - 20) if fmt == "verl-log" and step_lines else 0
    return "".join(lines[start : start + 80])


def log_with_numbers(fmt: str) -> st.SearchStrategy[str]:
    """The fixture log of ``fmt`` with every number in it redrawn from the whole range."""
    head = _log_head(fmt)
    spots = list(NUMBER.finditer(head))

    def fill(values: list[str]) -> str:
        out, last = [], 0
        for spot, value in zip(spots, values, strict=True):
            out += [head[last : spot.start()], value]
            last = spot.end()
        return "".join([*out, head[last:]])

    number = st.one_of(
        st.just(None), ANY_NUMBER.map(str), st.sampled_from(["nan", "inf", "1e400", "99999999999"])
    )
    return st.lists(number, min_size=len(spots), max_size=len(spots)).map(
        lambda drawn: fill(
            [spot.group() if v is None else v for spot, v in zip(spots, drawn, strict=True)]
        )
    )


def _log_property(fmt: str) -> Callable[[], None]:
    @settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(log_with_numbers(fmt))
    def check(text: str) -> None:
        source = parse_bytes(LOG_FILES[fmt].name, text.encode(), fmt)
        if source is not None:
            assert source.metrics["value"].dtype == pl.Float64

    check.__name__ = f"test_{fmt.replace('-', '_')}_with_any_numbers_ends_in_a_table_or_one_refusal"
    return check


for _fmt in LOG_FILES:
    _test = _log_property(_fmt)
    globals()[_test.__name__] = _test


# --- interval algebra ----------------------------------------------------------------------------

spans = st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 200)), max_size=25)


def frame(pairs: list[tuple[int, int]]) -> pl.DataFrame:
    return pl.DataFrame({"start_ns": [s for s, _ in pairs], "end_ns": [s + d for s, d in pairs]},
                        schema={"start_ns": pl.Int64, "end_ns": pl.Int64})


def covered(pairs: list[tuple[int, int]]) -> set[int]:
    """The oracle: every covered nanosecond."""
    return {t for s, d in pairs for t in range(s, s + d)}


@INTERVAL_RUNS
@given(spans)
def test_union_length_is_the_covered_time(pairs) -> None:
    merged = intervals.union(frame(pairs))
    assert int(intervals.union_length(frame(pairs))["length_ns"][0]) == len(covered(pairs))
    starts, ends = merged["start_ns"].to_list(), merged["end_ns"].to_list()
    assert all(e > s for s, e in zip(starts, ends, strict=True))
    assert all(ends[i] < starts[i + 1] for i in range(len(starts) - 1))


@INTERVAL_RUNS
@given(spans, spans)
def test_intersection_and_difference_match_the_oracle(a, b) -> None:
    both = intervals.length(intervals.intersection(frame(a), frame(b)))["length_ns"][0]
    only_a = intervals.length(intervals.difference(frame(a), frame(b)))["length_ns"][0]
    assert both == len(covered(a) & covered(b))
    assert only_a == len(covered(a) - covered(b))


@INTERVAL_RUNS
@given(spans.filter(bool))
def test_busy_plus_idle_is_the_window_and_idle_is_never_negative(pairs) -> None:
    activity = frame(pairs).filter(pl.col("end_ns") > pl.col("start_ns"))
    if activity.height == 0:
        return
    window = int(activity["end_ns"].max() - activity["start_ns"].min())
    busy = int(intervals.union_length(activity)["length_ns"][0])
    idle = window - busy
    assert busy + idle == window and 0 <= idle <= window
    gaps = intervals.difference(
        pl.DataFrame(
            {"start_ns": [activity["start_ns"].min()], "end_ns": [activity["end_ns"].max()]}
        ),
        activity,
    )
    assert int(intervals.length(gaps)["length_ns"][0]) == idle


@INTERVAL_RUNS
@given(spans, spans)
def test_overlap_each_is_what_the_cover_covers_of_each_interval(items, cover) -> None:
    items = [p for p in items if p[1] > 0]
    got = intervals.overlap_each(frame(items), frame(cover)).to_list()
    area = covered(cover)
    assert got == [len(set(range(s, s + d)) & area) for s, d in items]


@INTERVAL_RUNS
@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 500), st.integers(1, 100)), max_size=20)
)
def test_labelled_sweep_tiles_the_covered_time_once(tagged) -> None:
    frame_ = pl.DataFrame(
        {
            "rank": [0] * len(tagged),
            "label": [t[0] for t in tagged],
            "start_ns": [t[1] for t in tagged],
            "end_ns": [t[1] + t[2] for t in tagged],
        },
        schema={"rank": pl.Int32, "label": pl.Int8, "start_ns": pl.Int64, "end_ns": pl.Int64},
    )
    pieces = intervals.labelled_sweep(frame_, ["rank"], 3)
    assert int((pieces["end_ns"] - pieces["start_ns"]).sum() or 0) == len(
        covered([(s, d) for _, s, d in tagged])
    )
    for label, start, end in pieces.select("label", "start_ns", "end_ns").iter_rows():
        point = (start + end) // 2
        assert label == min(lbl for lbl, s, d in tagged if s <= point < s + d)
