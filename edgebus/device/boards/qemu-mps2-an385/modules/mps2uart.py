"""machine.UART's subset the link uses, for the MPS2 board (the qemu port has
no machine.UART): UART1, interrupt-driven in board.c (module mps2)."""

import mps2


class UART:
    def __init__(self, id, baudrate=115200, **kw):
        # The emulated line has no speed; baudrate is accepted for the config.
        if id != 1:
            raise ValueError("UART(%r): this board's link UART is 1 (0 is the REPL)" % (id,))

    def any(self):
        return mps2.uart_any()

    def read(self, n=-1):
        return mps2.uart_read(n if n >= 0 else 1024)

    def write(self, buf):
        return mps2.uart_write(buf)

    def deinit(self):
        pass
