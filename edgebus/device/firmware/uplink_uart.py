"""UART uplink: machine.UART on boards (or the board's own UART class named by
uart.driver where the port has none), a tty path (raw, VMIN=0) on the unix
port and CPython; both polled by PolledTransport, so reads never block."""

from edgebus.link.stream import PolledTransport
from firmware import opt

try:
    import termios
except ImportError:  # boards; a unix port built without termios
    termios = None


class _Uart:
    """machine.UART made non-blocking: read only what is there."""

    def __init__(self, u):
        self.u = u

    def read(self, n):
        k = self.u.any()
        return self.u.read(min(n, k)) if k else None

    def write(self, b):
        return self.u.write(b)

    def close(self):
        d = getattr(self.u, "deinit", None)
        if d:
            d()


def _raw(f, baud):
    """Raw mode, VMIN=0 VTIME=0 (a read returns what is there), baud if known."""
    if termios is None:
        return  # rely on the tty being raw already (stty raw -echo min 0 time 0)
    fd = f.fileno()
    try:
        import tty  # CPython

        tty.setraw(fd)
    except ImportError:
        termios.setraw(fd)  # MicroPython unix
    a = termios.tcgetattr(fd)
    cc = a[6]
    cc[getattr(termios, "VMIN", 6)] = 0
    cc[getattr(termios, "VTIME", 5)] = 0
    sp = getattr(termios, "B%d" % baud, None)
    if sp is not None:
        a[4] = a[5] = sp
    termios.tcsetattr(fd, termios.TCSANOW, a)


class UartTransport(PolledTransport):
    def close(self):
        if not self.closed:
            PolledTransport.close(self)
            try:
                self.f.close()
            except OSError:
                pass


def prepare(ctx):
    """Allocate the frame reader every open reuses, at boot: its buffers are
    long-lived data, counted in the heap budget check before the link runs."""
    from edgebus.link.frame import FrameReader

    ctx.frames = FrameReader(ctx.link.opts.max_len)


def open(ctx, u=None):
    """A transport over the UART or tty of gateway config u (default: the
    uplink config itself)."""
    u = ctx.config["uplink"] if u is None else u
    bu = ctx.board.get("uart", {})
    port = u.get("port", bu.get("device", bu.get("id")))
    baud = u.get("baud", bu.get("baud", 115200))
    if port is None:
        raise OSError("no UART: set uplink.port (a UART id or a tty path)")
    if type(port) is int:
        # A port without machine.UART names the board's own driver (uart.driver).
        drv = bu.get("driver")
        UART = __import__(drv).UART if drv else __import__("machine").UART
        kw = {"baudrate": baud}
        for p in ("tx", "rx"):
            v = u.get(p, bu.get(p))
            if v is not None:
                kw[p] = v
        f = _Uart(UART(port, **kw))
    else:
        f = _open_tty(port)
        _raw(f, baud)
    fr = getattr(ctx, "frames", None)
    t = UartTransport(f, poll_ms=opt(u, "uplink", "poll_ms"), frames=fr)
    ctx.frames = t.frames  # reused by every later reopen (see PolledTransport)
    return t


def _open_tty(path):
    import builtins

    try:
        import os

        # CPython: non-blocking, so a full tty buffer makes write() return
        # None (PolledTransport waits and retries) instead of stalling the loop.
        fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        return builtins.open(fd, "r+b", buffering=0)
    except (ImportError, AttributeError):
        pass  # MicroPython's os has no open(): its files are unbuffered already
    try:
        return builtins.open(path, "r+b", buffering=0)
    except TypeError:  # MicroPython: files are unbuffered already
        return builtins.open(path, "r+b")
