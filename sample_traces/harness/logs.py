"""The frameworks' own log lines, written with the numbers this run measured.

verl ≥ 0.5 console logger: ``step:N - key:value - …`` with ``pprint.pformat`` values, printed by
the driver (under Ray with a ``(TaskRunner pid=N)`` prefix). OpenRLHF ≥ 0.10: Python logging
``%(levelname)s %(asctime)s %(filename)s:%(lineno)d] %(message)s`` (date ``%m-%d %H:%M:%S``)
with ``✨ Global step N: {dict repr}``.
"""

from __future__ import annotations

import pprint
from datetime import datetime, timedelta
from pathlib import Path
from typing import TextIO

OPENRLHF_LINE_NO = {"start": 476, "made": 487, "step": 533}
"""Line numbers printed in the OpenRLHF ``filename:lineno`` field (fixed for this harness)."""


def verl_line(step: int, metrics: dict[str, float | int], ray_pid: int | None = None) -> str:
    body = " - ".join([f"step:{step}", *(f"{k}:{pprint.pformat(v)}" for k, v in metrics.items())])
    return f"(TaskRunner pid={ray_pid}) {body}" if ray_pid is not None else body


def openrlhf_prefix(when_ns: int, line_no: int) -> str:
    stamp = datetime.fromtimestamp(when_ns / 1e9).strftime("%m-%d %H:%M:%S")
    return f"INFO {stamp} ppo_trainer.py:{line_no}] "


def openrlhf_step_lines(step: int, n_samples: int, t_start: int, t_made: int, t_end: int,
                        status: dict[str, float]) -> list[str]:
    made = str(timedelta(seconds=(t_made - t_start) / 1e9)).split(".")[0]
    return [
        openrlhf_prefix(t_start, OPENRLHF_LINE_NO["start"])
        + f"🚀 Starting experience making with {n_samples} samples",
        openrlhf_prefix(t_made, OPENRLHF_LINE_NO["made"])
        + f"✨ Experience making completed in {made}",
        openrlhf_prefix(t_end, OPENRLHF_LINE_NO["step"]) + f"✨ Global step {step}: {status!r}",
    ]


class LogFile:
    """One text log, appended line by line as the driver prints it."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fh: TextIO = path.open("w", encoding="utf-8")

    def write(self, *lines: str) -> None:
        for line in lines:
            self.fh.write(line + "\n")
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()
