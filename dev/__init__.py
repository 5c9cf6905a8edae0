"""Development tooling, not installed: benchmarks, the soak, the device-heap
tool, the test broker, the demo. Run from a checkout (``./do``)."""
