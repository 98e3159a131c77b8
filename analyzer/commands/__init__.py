"""One module per ``rlperf`` command; each registers itself on ``analyzer.cli.app``."""
