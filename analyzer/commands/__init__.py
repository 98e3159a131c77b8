"""One module per ``rlperf`` command, each defining its command function; ``analyzer.cli``
registers them (``COMMANDS``), and what they share is in ``shared.py``."""
