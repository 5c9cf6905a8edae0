"""edgebus benchmarks: `python -m dev.bench [--smoke]` runs them all."""
