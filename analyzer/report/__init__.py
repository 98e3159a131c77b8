"""Renderers of a run's results: terminal text, JSON (more formats join here)."""
