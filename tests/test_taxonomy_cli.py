"""``rlperf taxonomy`` prints the vocabulary, the profiles with their rules, the collective rules
and the guideline catalogue, in every format."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analyzer.cli import app
from taxonomy import collectives, profiles, vocab

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, ["taxonomy", *args], catch_exceptions=False, env={"COLUMNS": "250"})


def test_text_lists_every_part() -> None:
    out = invoke().output
    for name in (*vocab.STAGE_NAMES, *vocab.ROLES, *vocab.PLACEMENTS, *vocab.EXECUTION_MODES):
        assert name in out
    assert "TENSOR_MODEL_PARALLEL" in out and "generate_sequences" in out
    assert "Guideline catalogue" in out and "G1" in out


def test_json_holds_every_rule() -> None:
    doc = json.loads(invoke("--format", "json").output)
    assert [r["stage"] for r in doc["stages"]["rows"]] == list(vocab.STAGE_NAMES)
    assert len(doc["profiles"]["rows"]) == sum(
        len(p.rules) for p in profiles.load_profiles().values()
    )
    rules = collectives.load_rules()
    assert len(doc["collectives"]["rows"]) == len(rules.descriptions) + len(rules.kernels) + len(
        rules.patterns
    )
    assert {r["dim"] for r in doc["dimensions"]["rows"]} == set(vocab.DIMENSIONS)
    assert [r["cause"] for r in doc["idle_causes"]["rows"]] == list(vocab.IDLE_RULE_ORDER)
    assert [r["family"] for r in doc["communication"]["rows"]] == [
        f.name for f in collectives.load_families()
    ]
    deepep = next(r for r in doc["communication"]["rows"] if r["family"] == "deepep")
    assert (deepep["library"], deepep["dim"]) == ("DeepEP", "ep")


def test_one_part_one_profile_markdown() -> None:
    out = invoke("--part", "profiles", "--profile", "openrlhf", "--format", "md").output
    assert out.startswith("## Framework profiles")
    rows = [line for line in out.splitlines() if line.startswith("| openrlhf")]
    assert len(rows) == len(profiles.load_profiles()["openrlhf"].rules)
    assert "| verl" not in out


def test_user_rules_are_shown_first(tmp_path: Path) -> None:
    user = tmp_path / "rules.toml"
    user.write_text(
        '[profile]\nname = "verl"\n\n[[rules]]\nmatch = "^my_gen$"\nsource = "trace"\nstage = '
        '"rollout"\nrelation = "stage"\n'
    )
    doc = json.loads(
        invoke("--part", "profiles", "--profile", "verl", "--rules", str(user), "-f", "json").output
    )
    assert (
        doc["profiles"]["rows"][0]["match"] == "^my_gen$"
        and doc["profiles"]["rows"][0]["rule"] == "user:1"
    )


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["taxonomy", "--profile", "nosuch"])
    assert result.exit_code == 2 and "nosuch" in result.output
    missing, broken = tmp_path / "missing.toml", tmp_path / "broken.toml"
    broken.write_text("[[rules]]\nmatch = 'x'\nstage = 'launch'\nrelation = 'stage'\n")
    for flag, path, problem in (
        ("--collective-rules", missing, "cannot read"),
        ("--rules", broken, "rule 1: unknown stage 'launch'"),
    ):
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "from analyzer.cli import main; main()",
                "taxonomy",
                flag,
                str(path),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2 and done.stdout == ""
        line = done.stderr.strip()
        assert (
            line.startswith(f"rlperf: error: {path}: {problem}")
            and "\n" not in line
            and line.count(str(path)) == 1
        ), line


@pytest.mark.parametrize("part", ["stages", "collectives", "placements"])
def test_output_file(tmp_path: Path, part: str) -> None:
    target = tmp_path / f"{part}.md"
    invoke("--part", part, "-f", "md", "-o", str(target))
    assert target.read_text().startswith("## ")


def test_profiles_at_80_columns_are_a_list_of_whole_rules() -> None:
    """The 171 profile rules need 136 columns as a table; at 80 that table folded every cell
    into fragments (``profil/e``, ``^(time/perf/|/train\\``). They are listed, one entry a rule,
    each field on its line, every pattern as written (``^step\\[``, which rich markup showed as
    ``^step[``), and the 150 patterns that fit a line whole on one."""
    done = runner.invoke(app, ["taxonomy", "--part", "profiles"], env={"COLUMNS": "80"})
    lines = done.output.splitlines()
    rules = [r for p in profiles.load_profiles().values() for r in p.rules]
    assert len(rules) == 171
    assert max(len(line) for line in lines) <= 80
    assert "171 entries, as a list (their table needs 136 columns)" in " ".join(lines[:3])
    assert sum(line.startswith("profile   ") for line in lines) == 171
    assert fields(lines, "match") == [r.match.replace(" ", "") for r in rules]
    assert sum(f"match     {r.match}" in map(str.rstrip, lines) for r in rules) == 150


def fields(lines: list[str], name: str) -> list[str]:
    """Each entry's ``name`` field, its continuation lines joined (spaces dropped: a long value
    breaks at a space or anywhere)."""
    out: list[str] = []
    inside = False
    for line in lines:
        if line.startswith(f"{name} "):
            out.append(line[len(name):].replace(" ", ""))
            inside = True
        elif inside and line.startswith(" "):
            out[-1] += line.replace(" ", "")
        else:
            inside = False
    return out


def test_stages_at_80_and_profiles_in_a_file_stay_tables(tmp_path: Path) -> None:
    """A part whose columns fit readably stays a table: the stages at 80 columns, the
    profiles at the 160 of a file (-o), each header whole on one line and each cell as written
    (rich markup made ``^step\\[`` ``^step[``)."""
    done = runner.invoke(app, ["taxonomy", "--part", "stages"], env={"COLUMNS": "80"})
    lines = done.output.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert [c.strip() for c in lines[2].strip("┃").split("┃")] == ["id", "stage", "title", "what"]
    target = tmp_path / "profiles.txt"
    invoke("--part", "profiles", "-o", str(target))
    lines = target.read_text().splitlines()
    assert max(len(line) for line in lines) <= 160
    assert [c.strip() for c in lines[2].strip("┃").split("┃")] == [
        "profile", "rule", "source", "match", "stage", "role", "relation", "versions", "note"
    ]
    assert sum(line.startswith("│ ") for line in lines) >= 169
    assert sum("│ ^step\\[[A-Z_]+( " in line for line in lines) == 1  # as written, not ^step[[


def test_a_flag_reads_as_a_word_in_text_and_markdown_and_stays_a_bool_in_json() -> None:
    """The guideline list printed ``heuristic  False``, Python's spelling; a reader gets yes/no,
    row for row as JSON's booleans (30 heuristic checks, G1's share alone is not)."""
    rows = json.loads(runner.invoke(app, ["taxonomy", "--part", "guidelines", "-f", "json"])
                      .output)["guidelines"]["rows"]
    flags = [r["heuristic"] for r in rows]
    assert (flags.count(True), flags.count(False), flags.index(False)) == (30, 1, 0)
    text = runner.invoke(app, ["taxonomy", "--part", "guidelines"], env={"COLUMNS": "80"}).output
    words = [line.split()[1] for line in text.splitlines() if line.startswith("heuristic ")]
    assert words == ["yes" if f else "no" for f in flags]
    md = runner.invoke(app, ["taxonomy", "--part", "guidelines", "-f", "md"]).output
    assert "| True |" not in md and "| False |" not in md and md.count("| yes |") == 30
