"""``rlperf compare``: a group's exposed communication is read only from a run that has
collectives in that group (a group it has none in is –, null, and takes no part in the winner);
the world group of a run of one pool whose collectives name no other dimension is its DP group;
the same in every format.

The runs: verl_grpo_colocated (sample run; its gloo collectives are DP and weight-sync), trl_grpo
(sample run; 2 ranks of pure DP, all its collectives over all ranks), nsys-ai's
mfu_2gpu_before.sqlite (NCCL all_to_all, EP, and 2 send/recv kernels whose group is unknown)
and VERL-Maze's verl_demo.log (a log: no trace to search).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_truth import RUNS, cli

from analyzer.model.units import duration

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
MFU = CORPUS / "nsys-ai" / "mfu_2gpu_before.sqlite"
LOG = CORPUS / "VERL-Maze" / "verl_demo.log"
INPUTS = [RUNS / "verl_grpo_colocated", RUNS / "trl_grpo", MFU, LOG]
LABELS = ["colocated", "trl", "mfu", "log"]

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is not here")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The comparison written as JSON, Markdown and text, as the user runs it."""
    root = tmp_path_factory.mktemp("compare")
    labels = [x for label in LABELS for x in ("-l", label)]
    out = {}
    for fmt in ("json", "md", "text"):
        path = root / f"cmp.{fmt}"
        done = cli("compare", *map(str, INPUTS), *labels, "-f", fmt, "-o", str(path), "-q",
                   "--width", "200")
        assert done.returncode == 0, done.stderr
        out[fmt] = path.read_text()
    return out


def values(outputs: dict[str, str], metric: str) -> dict[str, float | None] | None:
    """The metric's value per run, None when no run has it (no row)."""
    found = [m for m in json.loads(outputs["json"])["metrics"] if m["metric"] == metric]
    assert len(found) <= 1, metric
    return found[0]["values"] if found else None


def test_the_world_group_of_pure_dp_is_the_dp_group(outputs) -> None:
    """trl's 94.7 ms over all ranks are its DP group's (2 ranks, one pool, no other dimension):
    DP reads 94.7 ms against colocated's 35.4 ms, where it read 0 ns and won; no run keeps an
    all-ranks row (colocated's read 0 ns and won against trl's 94.7 ms)."""
    total = values(outputs, "overview.exposed_comm_ns")
    dp = values(outputs, "exposed.dp")
    assert total is not None and dp is not None
    assert dp["trl"] == total["trl"] > 90e6
    assert 30e6 < dp["colocated"] < 40e6
    assert values(outputs, "exposed.world") is None


def test_a_group_the_run_has_no_collectives_in_is_null(outputs) -> None:
    """trl has no weight-sync group (its weight-sync share is – too): null, where it read 0 ns
    and won against colocated's 47.1 ms; colocated's DP and weight sync sum to its total, and
    neither it nor trl has collectives of unknown group."""
    total = values(outputs, "overview.exposed_comm_ns")
    dp, sync = values(outputs, "exposed.dp"), values(outputs, "exposed.weight_sync")
    unknown = values(outputs, "exposed.unknown")
    assert total and dp and sync and unknown
    assert sync["trl"] is None and sync["colocated"] > 40e6
    assert dp["colocated"] + sync["colocated"] == total["colocated"] > 80e6
    assert unknown["colocated"] is None and unknown["trl"] is None
    assert values(outputs, "overview.weight_sync_share")["trl"] is None  # type: ignore[index]


def test_a_group_the_run_cannot_tell_is_null(outputs) -> None:
    """mfu's 25.4 ms of exposed communication: 25,179,513 ns of all_to_all (its 64 SendRecv
    kernels are launched inside PyTorch's ``nccl:all_to_all`` NVTX ranges) and 222,239 ns of the
    2 SendRecv kernels with no launch in the capture (both recomputed with SQL on the export:
    each kernel's time no other kernel of its device covers). Nothing in that sequence-parallel
    run shows experts, so its all-to-all is of no known group either (it read EP by the
    pattern rule): all 25.4 ms are "group unknown", a row only mfu has, so no winner, and no
    run has an EP row. No other group can be read from it (DP, weight sync –); the log has
    nothing to search."""
    total = values(outputs, "overview.exposed_comm_ns")
    unknown = values(outputs, "exposed.unknown")
    assert total and unknown
    assert unknown["mfu"] == total["mfu"] == 25_179_513 + 222_239
    assert (unknown["colocated"], unknown["trl"], unknown["log"]) == (None, None, None)
    assert values(outputs, "exposed.ep") is None
    [row] = [m for m in json.loads(outputs["json"])["metrics"] if m["metric"] == "exposed.unknown"]
    assert row["winner"] is None
    for dim in ("dp", "weight_sync"):
        got = values(outputs, f"exposed.{dim}")
        assert got is not None and (got["mfu"], got["log"]) == (None, None), dim
    document = json.loads(outputs["json"])
    assert "null in JSON" in document["missing"]
    assert "a group needs collectives in it" in document["missing"]


def test_every_format_shows_the_same_cells(outputs) -> None:
    """The DP row: colocated 35.4 ms, trl 94.7 ms, mfu and the log –; the winner is colocated.
    The values come from the JSON, so the three formats of one comparison must agree."""
    md_row = next(x for x in outputs["md"].splitlines() if x.startswith("| exposed comm (DP"))
    cells = [c.strip() for c in md_row.strip("|").split("|")]
    dp = values(outputs, "exposed.dp")
    assert dp is not None
    change = f"+{100 * (dp['trl'] / dp['colocated'] - 1):.1f}%"
    assert cells == ["exposed comm (DP group)", duration(dp["colocated"]),
                     f"{duration(dp['trl'])} ({change})", "–", "–", "lower", "colocated"]
    assert change == "+167.3%"
    text_row = next(x for x in outputs["text"].splitlines() if x.startswith(" exposed comm (DP"))
    assert [c.strip() for c in text_row.split("│")] == cells
    for fmt in ("md", "text"):
        flat = " ".join(outputs[fmt].split())
        assert "the world group of a run of one pool with no other parallel dimension is its DP" \
            in flat
    assert "colocated wins 2: idle (sync_wait), exposed comm (DP group)" in outputs["text"]
