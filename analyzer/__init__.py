"""rlperf's analyzer: run assembly, classification, the analyses, reports, CLI and Python API."""
