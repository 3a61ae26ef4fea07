"""Benchmarks: run each from the repository root as ``python3 -m bench.NAME`` (see docs/benchmarks.md)."""
