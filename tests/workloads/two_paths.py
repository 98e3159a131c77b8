"""The same ranges seen by two profilers at once: PyTorch's (record_function) and nsys (NVTX).

Each range enters an NVTX push/pop range and a ``torch.profiler.record_function`` of the same
name, so a Kineto trace (written to the first argument) and the nsys report of the run describe
the same intervals. CPU activities only: no GPU is needed.
"""

from __future__ import annotations

import contextlib
import sys
import time

import nvtx
import torch
from torch.profiler import ProfilerActivity, profile, record_function


@contextlib.contextmanager
def both(name: str):
    with nvtx.annotate(name), record_function(name):
        yield


def main(trace: str) -> None:
    x = torch.ones(64, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with both("warm-up"):  # the first record_function sets up; not one of the ranges compared
            pass
        for step in range(2):
            with both(f"step {step}"):
                with both("rollout"):
                    time.sleep(0.020)
                    with both("generate"):
                        x = x @ x / 64
                        time.sleep(0.010)
                with both("update_actor"):
                    time.sleep(0.015)
    prof.export_chrome_trace(trace)


if __name__ == "__main__":
    main(sys.argv[1])
