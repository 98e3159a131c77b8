"""First on the path of the test cluster's processes and drivers (tests/test_ray_engine.py):
``import ray`` imports jsonschema, whose optional IRI check imports this package when it is
installed (the test extra's notebook tools install it), and the real one builds a grammar at
import: 1.9 of the 2.5 CPU seconds every Ray process spends starting. A Ray head starts six such
processes at once, and its raylet gives its agent 15 s to come up; on a busy 2-core machine it
missed that and the head never started. jsonschema skips the check when the import fails, and
neither Ray nor rlperf validates IRIs."""

raise ImportError("rfc3987_syntax is left out of the test cluster's processes")
