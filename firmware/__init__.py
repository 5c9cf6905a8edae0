"""edgebus device runtime (MicroPython and CPython). Entry point: firmware.main."""
VERSION = "0.1.0"


def mem():
    """(alloc, free) heap bytes, or (None, None) where gc cannot tell (CPython)."""
    import gc
    try:
        return gc.mem_alloc(), gc.mem_free()
    except AttributeError:
        return None, None
