"""A seeded mutation fuzzer over the real corpus and the bundled samples.

``seeds`` cuts small base inputs out of the real files (windows of events, trimmed SQLite
exports, runs of log lines); ``mutators`` damages them deterministically (case ``i`` of a family
under seed ``s`` is always the same bytes); ``invariants`` states what must hold of whatever
rlperf makes of a damaged input; ``runner`` runs batches of cases in worker processes with a
memory limit and a per-case time limit and counts outcomes per parser. ``long_run`` is the
command line (``make fuzz``); ``tests/test_fuzz_corpus.py`` is the CI-sized run.
"""
