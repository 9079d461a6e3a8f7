"""Benchmarks: `mrc-testbed bench` runs the sections and writes BENCHMARKS.md."""
