"""Measurements of the app, run as modules from the repository root (`python -m
benchmarks.bench_speed`), so that the repository's `devtools/` and the benchmarks import."""
