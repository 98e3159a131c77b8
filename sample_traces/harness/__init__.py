"""The sample harness: real tiny GRPO/PPO runs on CPU, profiled, with their ground truth.

``python -m sample_traces.harness.run`` (or ``make samples``) regenerates ``sample_traces/runs``;
docs/samples.md describes what each run holds.
"""
