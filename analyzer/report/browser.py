"""Open an HTML report in headless Chromium with the network cut off: what rendered, what the
console said, and screenshots (for the tests and ``make docs-images``).

Chromium runs with a fresh profile, every network request sent to a dead proxy and every host
name unresolvable, so a report that needed the network would show it as console errors. The page
is given virtual time to finish drawing, then its DOM is dumped: each chart container
(``data-chart``) must hold an ``<svg>`` or ``<canvas>``. Console messages come from Chromium's
log on stderr (``CONSOLE`` lines).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

FLAGS: tuple[str, ...] = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND",
    "--enable-logging=stderr", "--v=0", "--hide-scrollbars", "--virtual-time-budget=20000",
)
TIMEOUT_S = 120
_CONSOLE = re.compile(r":CONSOLE[:(]\d+\)?\] (.*)$")


class BrowserError(RuntimeError):
    pass


@dataclass
class Rendered:
    dom: str
    console: list[str]
    charts: dict[str, dict[str, int | str]] = field(default_factory=dict)
    """chart id → ``rendered`` (the page's own record), ``svg`` and ``canvas`` counts inside it."""


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def render(page: Path, *, width: int = 1280, height: int = 2000) -> Rendered:
    """Load ``page`` offline, let it draw, and return its DOM, console lines and charts."""
    out, err = _run(["--dump-dom", f"--window-size={width},{height}", page.resolve().as_uri()])
    console = [m.group(1) for line in err.splitlines() if (m := _CONSOLE.search(line))]
    parser = _Charts()
    parser.feed(out)
    return Rendered(dom=out, console=console, charts=parser.charts)


def screenshot(page: Path, png: Path, *, width: int = 1280, height: int = 2000) -> Path:
    """A PNG of the first ``width`` × ``height`` pixels of ``page`` as drawn offline."""
    png.parent.mkdir(parents=True, exist_ok=True)
    _run(["--run-all-compositor-stages-before-draw", f"--screenshot={png.resolve()}",
          f"--window-size={width},{height}", page.resolve().as_uri()])
    if not png.is_file():
        raise BrowserError(f"{page}: Chromium wrote no screenshot")
    return png


def _run(args: list[str]) -> tuple[str, str]:
    binary = chromium()
    if binary is None:
        raise BrowserError("Chromium is not installed (apt-get install chromium)")
    profile = tempfile.mkdtemp(prefix="rlperf-chromium-")
    command = [binary, *FLAGS, f"--user-data-dir={profile}", *args]
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise BrowserError(f"Chromium did not finish within {TIMEOUT_S} s") from None
    finally:
        _reap(proc.pid)
        shutil.rmtree(profile, ignore_errors=True)
    if proc.returncode != 0:
        raise BrowserError(f"Chromium exited with status {proc.returncode}: {err.strip()[-400:]}")
    return out, err


def _reap(group: int) -> None:
    """Chromium's helper processes share its session: make sure none outlives it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)


class _Charts(HTMLParser):
    """Counts ``svg`` / ``canvas`` elements inside every ``data-chart`` container."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: dict[str, dict[str, int | str]] = {}
        self._open: list[tuple[str, int]] = []
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "div":
            self._depth += 1
            if found.get("data-chart"):
                key = str(found["data-chart"])
                self.charts[key] = {
                    "rendered": str(found.get("data-rendered") or ""),
                    "svg": 0,
                    "canvas": 0,
                }
                self._open.append((key, self._depth))
        elif tag in ("svg", "canvas") and self._open:
            entry = self.charts[self._open[-1][0]]
            entry[tag] = int(entry[tag]) + 1

    def handle_endtag(self, tag: str) -> None:
        if tag != "div":
            return
        if self._open and self._open[-1][1] == self._depth:
            self._open.pop()
        self._depth -= 1
