"""edgebus bridge: the host daemon (CPython only)."""
