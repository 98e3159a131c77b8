"""Bad input for the log and span parsers: a clear error or a partial result with warnings,
never a crash, and every event table still meets the contract."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import parsers
from parsers import nsys_stats, spans
from parsers.discover import parser_for
from parsers.events import validate
from parsers.logs import areal, deepspeed_chat, nemo_rl, openrlhf, roll, slime, trl, verl

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
PARSERS = (verl, openrlhf, trl, nemo_rl, slime, areal, roll, deepspeed_chat, spans)
SAMPLES = sorted(p for p in FIXTURES.iterdir() if p.is_file())
NSYS_CSV = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "pipit" / "trace.csv"


def outcome(module, path: Path) -> parsers.ParsedSource | None:
    try:
        out = module.parse(path)
    except parsers.InputError as exc:
        assert path.name in str(exc)
        return None
    validate(out.events)
    return out


@pytest.mark.parametrize("module", PARSERS, ids=lambda m: m.FORMAT)
def test_empty_and_binary_files(tmp_path, module):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    out = outcome(module, empty)
    assert out is None or (out.events.height == 0 and out.warnings)
    binary = tmp_path / "blob.log"
    binary.write_bytes(bytes(range(256)) * 64)
    out = outcome(module, binary)
    assert out is None or out.events.height == 0


@pytest.mark.parametrize(
    ("module", "sample"),
    [(slime, FIXTURES / "slime_perf.log"), (spans, FIXTURES / "verl_ray_timeline.json"), (nsys_stats, NSYS_CSV)],
    ids=lambda v: getattr(v, "FORMAT", getattr(v, "name", None)),
)
@pytest.mark.parametrize("damage", ["cut", "corrupt deflate data", "bad CRC"])
def test_a_broken_gzip_is_one_clear_error(tmp_path, module, sample: Path, damage: str):
    data = bytearray(gzip.compress(sample.read_bytes()))
    if damage == "cut":
        data = data[: len(data) // 2]
    elif damage == "bad CRC":
        data[-8] ^= 0xFF
    else:
        data[10:40] = bytes(30)
    broken = tmp_path / f"{sample.name}.gz"
    broken.write_bytes(bytes(data))
    with pytest.raises(parsers.InputError) as err:
        module.parse(broken)
    assert broken.name in str(err.value) and "gzip" in str(err.value)


def test_gzipped_logs_are_read(tmp_path):
    packed = tmp_path / "roll_rlvr.log.gz"
    packed.write_bytes(gzip.compress((FIXTURES / "roll_rlvr.log").read_bytes()))
    assert parsers.sniff(packed) == "roll-log"
    assert parsers.parse_file(packed).meta["n_steps"] == 3


def test_huge_and_negative_numbers(tmp_path):
    path = tmp_path / "odd.log"
    path.write_text(
        "step:1 - timing_s/gen:1e400 - timing_s/ref:-2.0 - timing_s/step:99999999999999999999999 - x:123456789012345678901234567890\n"
        "step:2 - timing_s/gen:nan - timing_s/step:3.0\n"
    )
    out = verl.parse(path)
    validate(out.events)
    assert any(w.endswith("4 timer values dropped: not a finite, non-negative duration under a year "
                          "(timing_s/gen, timing_s/ref, timing_s/step)") for w in out.warnings)
    assert out.events.select("step", "name").rows() == [(2, "timing_s/step")]
    assert out.metrics["value"].to_list() == [1.2345678901234568e29]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(SAMPLES), st.integers(0, 2**32 - 1), st.sampled_from(["cut", "drop", "swap", "garble"]))
def test_damaged_fixtures_never_crash(tmp_path, sample, seed, damage):
    rng = random.Random(seed)
    data = bytearray(sample.read_bytes())
    if damage == "cut":
        data = data[: rng.randrange(len(data))]
    elif damage == "drop":
        start = rng.randrange(len(data))
        del data[start : start + rng.randrange(1, 200)]
    elif damage == "swap":
        lines = bytes(data).split(b"\n")
        rng.shuffle(lines)
        data = bytearray(b"\n".join(lines))
    else:
        for _ in range(20):
            data[rng.randrange(len(data))] = rng.randrange(256)
    path = tmp_path / sample.name
    path.write_bytes(bytes(data))
    fmt = parsers.sniff(path)
    if fmt is None:
        return
    outcome(parser_for(fmt), path)
