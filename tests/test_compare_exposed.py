"""``rlperf compare``: a group's exposed communication is 0 ns where the run has searched
collectives and none is exposed in that group, and unknown (``–``, null) only where the run
cannot tell, the same in every format.

The runs: verl_grpo_colocated (sample run; its gloo collectives are DP and weight-sync, none over
all ranks), trl_grpo (sample run; all its collectives are over all ranks), nsys-ai's
mfu_2gpu_before.sqlite (NCCL send/recv whose group is unknown) and VERL-Maze's verl_demo.log (a
log: no trace to search).
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


def values(outputs: dict[str, str], metric: str) -> dict[str, float | None]:
    found = [m for m in json.loads(outputs["json"])["metrics"] if m["metric"] == metric]
    assert len(found) == 1, metric
    return found[0]["values"]


def test_a_group_none_of_the_runs_collectives_lie_in_is_0_ns(outputs) -> None:
    """colocated: 0 ns over all ranks (its 82.5 ms are 35.4 ms DP and 47.1 ms weight sync);
    trl: 0 ns in DP and weight sync (its 94.7 ms are all over all ranks); both 0 ns of unknown
    group. Before, each was null, while a run without any collective read 0."""
    total = values(outputs, "overview.exposed_comm_ns")
    world = values(outputs, "exposed.world")
    dp = values(outputs, "exposed.dp")
    sync = values(outputs, "exposed.weight_sync")
    unknown = values(outputs, "exposed.unknown")
    assert world["colocated"] == 0 and world["trl"] == total["trl"] > 90e6
    assert dp["colocated"] + sync["colocated"] == total["colocated"] > 80e6
    assert dp["colocated"] > 30e6 and sync["colocated"] > 40e6
    assert dp["trl"] == 0 and sync["trl"] == 0
    assert unknown["colocated"] == 0 and unknown["trl"] == 0


def test_a_group_the_run_cannot_tell_is_null(outputs) -> None:
    """mfu's 25.4 ms of exposed send/recv are of unknown group, so no named group can be read
    from it; the log has nothing to search."""
    total = values(outputs, "overview.exposed_comm_ns")
    assert values(outputs, "exposed.unknown")["mfu"] == total["mfu"] > 25e6
    for dim in ("world", "dp", "weight_sync"):
        got = values(outputs, f"exposed.{dim}")
        assert (got["mfu"], got["log"]) == (None, None), dim
    assert values(outputs, "exposed.unknown")["log"] is None
    document = json.loads(outputs["json"])
    assert "null in JSON" in document["missing"] and "unknown group" in document["missing"]


def test_every_format_shows_the_same_cells(outputs) -> None:
    """The all-ranks row: colocated 0 ns, trl 94.7 ms, mfu and the log –; the winner is
    colocated (0 ns against 94.7 ms); each format's footnote says what – means. The values come
    from the JSON, so the three formats of one comparison must agree."""
    md_row = next(x for x in outputs["md"].splitlines() if x.startswith("| exposed comm (all"))
    cells = [c.strip() for c in md_row.strip("|").split("|")]
    trl = duration(values(outputs, "exposed.world")["trl"])
    assert cells == ["exposed comm (all ranks)", "0 ns", f"{trl} (+{trl})", "–", "–",
                     "lower", "colocated"]
    text_row = next(x for x in outputs["text"].splitlines() if x.startswith(" exposed comm (all"))
    assert [c.strip() for c in text_row.split("│")] == cells
    for fmt in ("md", "text"):
        flat = " ".join(outputs[fmt].split())
        assert "exposed comm of a group is 0 ns in a run whose collectives all lie in other" in flat
    assert "colocated wins 2: idle (sync_wait), exposed comm (all ranks)" in outputs["text"]
