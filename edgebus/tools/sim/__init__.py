"""The simulators, where no real part can run here: devices running the real
firmware on the MicroPython unix port, the unix port as a board, an emulated
board in qemu, pty pairs as serial cables."""
