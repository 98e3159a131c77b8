"""The command line as a new user meets it: ``--version``, help in plain words with examples
that fits 80 columns, the reference page (docs/cli.md) naming exactly the real options, and
progress that counts files on a terminal and stays silent in a pipe."""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import typer
from report_truth import REPO, RUNS, cli

from analyzer.cli import COMMANDS, app, plain_help

NAMES = [c.__name__ for c in COMMANDS]
ARTEFACT = re.compile(r"\{[a-z_]+\}|<(?:list\[[A-Za-z]+\]|str|int|path|float)>")
"""Typer's type notation: ``{paths}...``, ``<list[Path]>``, ``<str>``, ``<int>``, ``<path>``."""


def test_version_is_the_packages():
    done = cli("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"rlperf {metadata.version('rlperf')}\n"


@pytest.mark.parametrize("command", NAMES)
def test_help_is_plain_words_with_examples_within_80_columns(command: str):
    done = cli(command, "--help", env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert ARTEFACT.findall(text) == []
    assert max(len(line) for line in text.splitlines()) <= 80
    examples = [line.strip() for line in text.split("Examples:\n", 1)[1].splitlines()]
    module = sys.modules[COMMANDS[NAMES.index(command)].__module__]
    assert [e for e in examples if e] == list(module.EXAMPLES)
    assert any(e.startswith(f"rlperf {command}") for e in examples)
    usage = text.splitlines()[0]
    assert usage.startswith(f"Usage: rlperf {command} [OPTIONS]")
    assert "{" not in usage and "<" not in usage


def test_the_top_level_help_has_examples_and_the_version_option():
    done = cli("--help", env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0
    assert "--version" in done.stdout and "Examples:" in done.stdout
    assert max(len(line) for line in done.stdout.splitlines()) <= 80


def sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## rlperf (\w+)\n", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_the_reference_page_names_exactly_each_commands_options():
    """docs/cli.md: every option of every command is in its table, every option the page names
    is real, and the examples are the ones ``--help`` shows."""
    command = plain_help(typer.main.get_command(app))
    page = sections((REPO / "docs" / "cli.md").read_text())
    assert list(page) == NAMES
    for name, text in page.items():
        params = command.commands[name].params
        real = {o for p in params for o in p.opts if o.startswith("-")}
        named = set(re.findall(r"`(--?[a-z][a-z-]*)`", text))
        assert named == real, name
        module = sys.modules[COMMANDS[NAMES.index(name)].__module__]
        block = text.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
        assert block == list(module.EXAMPLES), name


def stderr_on_a_terminal(*args: str) -> str:
    """``rlperf ARGS`` with stderr on a pseudo-terminal: what a user sees, escapes removed."""
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-c", "from analyzer.cli import main; main()", *args],
        stdout=subprocess.DEVNULL, stderr=slave, stdin=subprocess.DEVNULL, cwd=REPO,
        env={**os.environ, "COLUMNS": "120"},
    )
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    assert proc.wait(timeout=120) == 0
    return re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", seen).decode(errors="replace")


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_progress_counts_the_files_on_a_terminal_only(tmp_path: Path):
    """verl PPO disaggregated has five sources (a log and four traces): the bar counts 0/5 to
    5/5. In a pipe (CI) there is no progress at all, only the line saying where the report went."""
    run = RUNS / "verl_ppo_disaggregated"
    out = tmp_path / "r.json"
    args = ("analyze", str(run), "--format", "json", "-o", str(out), "--no-cache")
    shown = stderr_on_a_terminal(*args)
    assert "Reading sources" in shown and "0/5" in shown and "5/5" in shown
    piped = cli(*args)
    assert piped.returncode == 0
    assert piped.stderr == f"rlperf: wrote the json report to {out}\n"
