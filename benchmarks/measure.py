"""One fresh process measured: wall seconds, its own peak RSS, and the peak of the whole tree.

``ru_maxrss`` (from ``wait4``) is the largest single process of the tree, not their sum: with a
pool of parser workers beside the main process the machine holds more. The tree's total RSS is
therefore also sampled every ``interval`` seconds from ``/proc`` (Linux; elsewhere only
``ru_maxrss`` is given) and its maximum reported as ``tree_peak_mib``.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def measure(argv: list[str], env: dict[str, str], interval: float = 0.05) -> dict[str, float]:
    """Run ``argv`` to the end; its seconds, ``peak_rss_mib`` and ``tree_peak_mib``."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = [0]
    done = threading.Event()
    sampler = threading.Thread(target=_sample, args=(proc.pid, interval, peak, done), daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    if status != 0:
        raise RuntimeError(f"{' '.join(argv[:4])}… failed: {proc.stderr.read().decode()[-2000:]}")
    own = usage.ru_maxrss / 1024
    return {"seconds": seconds, "peak_rss_mib": own, "tree_peak_mib": max(own, peak[0] / 2**20)}


def _sample(root: int, interval: float, peak: list[int], done: threading.Event) -> None:
    while not done.wait(interval):
        peak[0] = max(peak[0], _tree_rss(root))


def _tree_rss(root: int) -> int:
    """Bytes resident in ``root`` and every descendant (0 where /proc is unreadable)."""
    parents: dict[int, int] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return 0
    for entry in proc.iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == parent and p not in tree]
        tree.update(kids)
        frontier += kids
    total = 0
    for pid in tree:
        try:
            total += int((proc / str(pid) / "statm").read_text().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            continue
    return total
