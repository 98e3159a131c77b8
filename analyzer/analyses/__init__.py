"""The analyses: one module each, with declared inputs and outputs (polars frames).

Each module states ``INPUTS`` (what of a run it reads) and ``OUTPUTS`` (the frames it returns,
with a one-line meaning each), and exposes a pure function over polars frames. ``Run`` calls
them lazily and caches the results.
"""
