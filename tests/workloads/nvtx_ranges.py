"""A small real workload for the nsys capture test: NVTX ranges it times itself.

Emits push/pop ranges (``nvtx.annotate``) nested three deep, a start/end range
(``nvtx.start_range``) that encloses push/pop ranges, and a mark, and writes what it did —
name, nesting depth, duration measured with ``time.perf_counter_ns`` and the wall-clock epoch
ns at which it opened — to the JSON file named by its first argument.
"""

from __future__ import annotations

import json
import sys
import time

import nvtx

RECORDS: list[dict] = []
_DEPTH = 0


class timed:
    """An NVTX push/pop range whose duration the workload measures around the push and pop."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> timed:
        global _DEPTH
        self.depth = _DEPTH
        _DEPTH += 1
        self.range = nvtx.annotate(self.name)
        self.epoch = time.time_ns()
        self.t0 = time.perf_counter_ns()
        self.range.__enter__()
        self.pushed = time.time_ns()
        return self

    def __exit__(self, *exc: object) -> None:
        global _DEPTH
        self.range.__exit__(None, None, None)
        dur = time.perf_counter_ns() - self.t0
        _DEPTH -= 1
        RECORDS.append(
            {
                "name": self.name,
                "depth": self.depth,
                "dur_ns": dur,
                "epoch_ns": self.epoch,
                "pushed_ns": self.pushed,
                "kind": "push/pop",
            }
        )


def busy(seconds: float) -> None:
    time.sleep(seconds)


def main(out: str) -> None:
    global _DEPTH
    for step in range(3):
        with timed(f"step {step}"):
            with timed("rollout"):
                busy(0.020)
                with timed("generate"):
                    busy(0.010)
            with timed("update_actor"):
                with timed("forward"):
                    busy(0.008)
                with timed("backward"):
                    busy(0.012)
        nvtx.mark("step done")
    epoch, t0 = time.time_ns(), time.perf_counter_ns()
    handle = nvtx.start_range("weight_sync")
    pushed = time.time_ns()
    _DEPTH += 1
    with timed("broadcast"):
        busy(0.015)
    nvtx.end_range(handle)
    _DEPTH -= 1
    RECORDS.append(
        {
            "name": "weight_sync",
            "depth": 0,
            "dur_ns": time.perf_counter_ns() - t0,
            "epoch_ns": epoch,
            "pushed_ns": pushed,
            "kind": "start/end",
        }
    )
    with open(out, "w") as fh:
        json.dump(RECORDS, fh)


if __name__ == "__main__":
    main(sys.argv[1])
