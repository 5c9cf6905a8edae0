"""A board's raw REPL through mpremote's transport (the library, not its
CLI): open the port (saying why it cannot), enter raw mode, run code, hash
files on the device in one exec, make directories, write files with a
progress bar and read their hashes back, leave (soft-resetting where the
board can). What edgebus deploy does with a board, one step each."""

from __future__ import annotations

import contextlib
import errno
import io
import os
from typing import Any, Callable

from edgebus.tools.boardkit import executables
from edgebus.tools.commands.progress import progress


class DeployError(Exception):
    """A problem the user must fix; the message says how."""


CHUNK = 256  # bytes per write exec: what mpremote uses, safe for small heaps


PROBE = (
    "import sys\nprint(repr((sys.implementation.name, sys.platform, "
    "getattr(sys.implementation, '_machine', ''), getattr(sys.implementation, '_mpy', 0), "
    "'.'.join(str(v) for v in sys.implementation.version[:3]))))"
)


# Prints "D <dir>" for every directory under DIRS and "F <path> <sha256>" for
# every file under DIRS and in FILES, all in one exec; small fixed buffer so it
# runs on an ESP8266's heap.
HASH = """\
import os
try:
 import hashlib,binascii
except ImportError:
 hashlib=None
def _h(p):
 if hashlib is None:
  print('F\\t'+p+'\\t?');return
 try:
  f=open(p,'rb')
 except OSError:
  return
 h=hashlib.sha256();b=bytearray(256);m=memoryview(b)
 while 1:
  n=f.readinto(b)
  if not n:break
  h.update(m[:n])
 f.close()
 print('F\\t'+p+'\\t'+binascii.hexlify(h.digest()).decode())
def _w(d):
 try:
  it=list(os.ilistdir(d))
 except OSError:
  return
 print('D\\t'+d)
 for e in it:
  p=d+'/'+e[0]
  if e[1]&0x4000:_w(p)
  else:_h(p)
for _d in %r:_w(_d)
for _p in %r:_h(_p)
del _h,_w
"""


def open_board(port: str, baud: int, timeout: float) -> Any:
    """An mpremote SerialTransport on port, or a DeployError saying why not."""
    try:
        from mpremote.transport import TransportError
        from mpremote.transport_serial import SerialTransport
    except ImportError:
        raise DeployError(
            "mpremote is not installed: " + executables.install_hint("mpremote")
        ) from None
    if port.startswith("/") and not os.path.exists(port):
        raise DeployError(
            "port %s does not exist: is the board plugged in? (`mpremote "
            "connect list` lists serial ports)" % port
        )
    try:
        # A read timeout: on a pty mpremote reads blocking, and with none a silent
        # device would hang it forever instead of reaching its own timeouts.
        return SerialTransport(port, baudrate=baud, timeout=min(2.0, timeout))
    except TransportError:
        raise DeployError(_open_failure(port, baud)) from None


def _open_failure(port: str, baud: int) -> str:
    # SerialTransport reports every failure as "failed to access"; pyserial says why.
    import serial

    try:
        serial.Serial(port, baud, exclusive=True).close()
    except (OSError, serial.SerialException) as e:
        text = str(e)
        code = getattr(e, "errno", None)
        if code in (errno.EBUSY, errno.EAGAIN, errno.EWOULDBLOCK) or "exclusively lock" in text:
            return (
                "port %s is busy: another program has it open (mpremote, screen, "
                "minicom, Thonny, a serial monitor, another deploy); close it and retry" % port
            )
        if code == errno.EACCES:
            return (
                "no permission to open %s: add yourself to its group (e.g. `sudo "
                "usermod -aG dialout $USER`, then log in again)" % port
            )
        if code == errno.ENOENT:
            return "port %s does not exist: is the board plugged in?" % port
        return "cannot open port %s: %s" % (port, text)
    return "cannot open port %s (it opened on a second try: retry)" % port


def enter_raw(t: Any, soft_reset: bool, port: str, timeout: float, baud: int) -> None:
    from mpremote.transport import TransportError

    try:
        # mpremote prints what it read when it gives up; our message says more.
        with contextlib.redirect_stdout(io.StringIO()):
            t.enter_raw_repl(soft_reset=soft_reset, timeout_overall=timeout)
    except TransportError:
        raise DeployError(
            "no response from the REPL on %s within %g s: is it a MicroPython board at "
            "%d baud? A program that disables Ctrl-C or owns the UART can block it: "
            "press reset and retry" % (port, timeout, baud)
        ) from None


def hash_files(
    t: Any, root: str, dirs: list[str], files: list[str]
) -> tuple[dict[str, str], set[str]]:
    """({path: sha256} for files under dirs and in files, {dirs that exist}) in one exec."""
    out = run(
        t, HASH % ([root + d for d in dirs], [root + p for p in files]), "hashing the board's files"
    )
    found, seen_dirs = {}, set()
    for line in out.splitlines():
        parts = line.rstrip("\r").split("\t")
        if parts[0] == "F" and len(parts) == 3:
            found[parts[1][len(root) :]] = parts[2]
        elif parts[0] == "D" and len(parts) == 2:
            seen_dirs.add(parts[1][len(root) :])
    return found, seen_dirs


def run(t: Any, code: str, what: str) -> str:
    from mpremote.transport import TransportError, TransportExecError

    try:
        return t.exec(code).decode("utf-8", "replace")
    except TransportExecError as e:
        raise DeployError("%s failed on the device: %s" % (what, e.error_output.strip())) from None
    except TransportError as e:
        raise DeployError("%s: the board stopped answering (%s)" % (what, e)) from None


def make_dirs(t: Any, root: str, write: list[str], dev_dirs: set[str]) -> None:
    """Create the directories the files to write need, parents first."""
    need = sorted(
        {"/".join(p.split("/")[:i]) for p in write for i in range(1, p.count("/") + 1)} - dev_dirs,
        key=lambda d: d.count("/"),
    )
    if need:
        run(
            t,
            "import os\nfor d in %r:\n try:\n  os.mkdir(d)\n except OSError:\n  pass"
            % [root + d for d in need],
            "creating directories",
        )


def write_files(
    t: Any,
    root: str,
    write: list[str],
    sources: dict[str, str],
    cfg: bytes | None,
    local: dict[str, str],
    nbytes: int,
) -> None:
    """Write each file in write with a progress bar, then read back their hashes."""
    bar = progress(nbytes)
    try:
        for p in write:
            if p == "config.json" and cfg is not None:
                data = cfg
            else:
                with open(sources[p], "rb") as f:
                    data = f.read()
            bar.set_postfix_str(p)
            seen = [0]

            def step(done: int, _total: int, seen: list[int] = seen) -> None:
                bar.update(done - seen[0])
                seen[0] = done

            try:
                t.fs_writefile(root + p, data, chunk_size=CHUNK, progress_callback=step)
            except OSError as e:
                if e.errno == errno.ENOSPC:
                    raise DeployError(
                        "the board's filesystem is full while writing %s: "
                        "remove files or build a smaller bundle" % p
                    ) from None
                raise DeployError("writing %s on the board: %s" % (p, e)) from None
    finally:
        bar.close()
    # Read back what was written (one more exec) rather than trust the line.
    got, _ = hash_files(t, root, [], write)
    bad = [p for p in write if got.get(p) not in (local[p], "?")]  # ?: no hashlib
    if bad:
        raise DeployError(
            "the board's copy of %s differs after writing: retry the "
            "deploy (a noisy serial line?)" % ", ".join(bad)
        )


def restart(t: Any, board: dict[str, Any], reset: bool, log: Callable[[str], None]) -> None:
    """Leave the raw REPL, soft-resetting the board when asked and it can."""
    if not reset:
        t.exit_raw_repl()
    elif board["device"]["soft_reset"]:
        # Friendly REPL first: a soft reset from there runs boot.py and main.py.
        t.exit_raw_repl()
        t.serial.write(b"\x04")
        got = t.read_until(1, b"soft reboot", timeout=3)
        log(
            "soft reset: %s"
            % ("done, main.py runs" if got.endswith(b"soft reboot") else "sent (no confirmation)")
        )
    else:
        t.exit_raw_repl()
        log(
            "note: board %s has no soft reset (Ctrl-D would end the process); "
            "the files are in place, start the runtime yourself" % board["name"]
        )
