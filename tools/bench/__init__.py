"""edgebus benchmarks: `python -m tools.bench [--smoke]` runs them all."""
