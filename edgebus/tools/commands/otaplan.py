"""What `edgebus ota` decides without the bus: the bundle and its check
against its ota.jsonl, counts and shares (``3``, ``10%``), the waves, which
devices a pattern and a board select, the halt rule, and the lines it prints
(outcomes, the summary, the status table)."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
import os
import re
import time
from typing import Any, Iterable

from edgebus.tools.boardkit.otamanifest import MANIFEST, decode_manifest

# The device's one update endpoint (docs/protocol.md section 18), on the host bus.
OP = "dev/%s/sys/ota/op"
# What the device accepts as a trial's length, in seconds.
TRIAL_S = (10, 3600)
# What the device accepts as a bundle path (firmware/services/ota.py checks it too).
SAFE_PATH = re.compile(r"[A-Za-z0-9_./-]+\Z")

# Outcomes of one device.
COMMITTED, ALREADY, ROLLED_BACK, FAILED = "committed", "already running", "rolled back", "failed"


class BundleError(Exception):
    """A bundle that cannot be sent; the message names the file and why."""


class Bundle:
    """A checked bundle directory: ``manifest`` (the ota.jsonl bytes), ``hash``
    (their SHA-256, hex), ``version``, ``board``, ``paths`` and ``blobs``
    (file 0 is the manifest, then the files in the manifest's order)."""

    def __init__(self, path: str, manifest: bytes, meta: dict[str, Any], blobs: list[bytes]):
        self.dir = path
        self.manifest = manifest
        self.hash = hashlib.sha256(manifest).hexdigest()
        self.meta = meta
        self.version: str = meta["version"]
        self.board: str = meta["board"]
        self.paths = [MANIFEST] + [f[0] for f in meta["files"]]
        self.blobs = [manifest] + blobs
        self.sizes = [len(b) for b in self.blobs]
        self.total = sum(self.sizes)

    def short(self) -> str:
        return "%s (%s)" % (self.version, self.hash[:8])


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _no_manifest(path: str) -> str:
    board = "B"
    try:
        with open(os.path.join(path, "bundle.json")) as f:
            board = json.load(f).get("board") or board
    except (OSError, ValueError, AttributeError):
        pass
    return "%s has no %s: run `edgebus build --board %s` to make a bundle with one" % (
        path,
        MANIFEST,
        board,
    )


def _check_meta(where: str, meta: Any) -> None:
    if not isinstance(meta, dict):
        raise BundleError("%s: not a JSON object" % where)
    for k in ("version", "board"):
        if not isinstance(meta.get(k), str) or not meta[k]:
            raise BundleError("%s: %r must be a non-empty string" % (where, k))
    files = meta.get("files")
    if not isinstance(files, list):
        raise BundleError("%s: 'files' must be a list of [path, size, sha256]" % where)
    for f in files:
        if not (
            isinstance(f, list)
            and len(f) == 3
            and isinstance(f[0], str)
            and isinstance(f[1], int)
            and not isinstance(f[1], bool)
            and f[1] >= 0
            and isinstance(f[2], str)
        ):
            raise BundleError("%s: files entry %r is not [path, size, sha256]" % (where, f))
        p = f[0]
        if not SAFE_PATH.match(p) or p.startswith("/") or ".." in p.split("/"):
            raise BundleError(
                "%s: path %r is not a safe bundle path (letters, digits, _ . / -; no "
                "'..', no leading '/')" % (where, p)
            )


def load_bundle(path: str) -> Bundle:
    """The bundle at ``path`` once every file its ota.jsonl lists is there with
    the size and SHA-256 listed; BundleError naming the first that is not."""
    if not os.path.isdir(path):
        raise BundleError("%s: no such directory" % path)
    where = os.path.join(path, MANIFEST)
    try:
        manifest = _read(where)
    except FileNotFoundError:
        raise BundleError(_no_manifest(path)) from None
    except OSError as e:
        raise BundleError("%s: %s" % (where, e.strerror)) from None
    try:
        meta = decode_manifest(manifest)
    except ValueError as e:
        raise BundleError(
            "%s: not a manifest (JSON lines: a header, then a line a file): %s" % (where, e)
        ) from None
    _check_meta(where, meta)
    blobs = []
    for p, size, sha in meta["files"]:
        try:
            data = _read(os.path.join(path, p))
        except OSError as e:
            raise BundleError(
                "%s lists %s, which cannot be read: %s (rebuild the bundle)"
                % (where, p, e.strerror)
            ) from None
        if len(data) != size:
            raise BundleError(
                "%s: %d bytes, %s says %d (rebuild the bundle)" % (p, len(data), MANIFEST, size)
            )
        got = hashlib.sha256(data).hexdigest()
        if got != sha.lower():
            raise BundleError(
                "%s: SHA-256 %s..., %s says %s... (rebuild the bundle)"
                % (p, got[:16], MANIFEST, sha[:16])
            )
        blobs.append(data)
    return Bundle(path, manifest, meta, blobs)


# -- counts and shares: ("count", n) or ("share", percent)

Share = tuple[str, float]


def parse_share(text: str) -> Share:
    """``"3"`` a count of devices, ``"10%"`` a share of them; ValueError else."""
    t = text.strip()
    try:
        if t.endswith("%"):
            p = float(t[:-1])
            if 0 <= p <= 100:
                return ("share", p)
        else:
            n = int(t)
            if n >= 0:
                return ("count", n)
    except ValueError:
        pass
    raise ValueError("%r: a count of devices (3) or a share of them (10%%)" % text)


def amount(share: Share, n: int) -> int:
    """How many of n devices ``share`` is: a share rounds up, at most n."""
    kind, v = share
    k = math.ceil(n * v / 100 - 1e-9) if kind == "share" else int(v)
    return min(max(k, 0), n)


def canary_size(canary: Share, n: int) -> int:
    """The canary wave of n devices: a share is at least one, a count exact."""
    k = amount(canary, n)
    return max(k, 1) if canary[0] == "share" and n else k


def plan_waves(nodes: Iterable[str], canary: Share, wave: Share | None) -> list[list[str]]:
    """The nodes in waves: a canary wave (a share is at least one device; a
    count of 0 means none), then the rest in waves of ``wave`` (a share of
    all the nodes, at least one), or in one wave when it is None."""
    todo = sorted(nodes)
    if not todo:
        return []
    k = canary_size(canary, len(todo))
    waves = [todo[:k]] if k else []
    rest = todo[k:]
    size = len(rest) if wave is None else max(amount(wave, len(todo)), 1)
    for i in range(0, len(rest), max(size, 1)):
        waves.append(rest[i : i + size])
    return waves


def too_many(bad: int, size: int, halt: Share) -> bool:
    """Whether ``bad`` of a wave of ``size`` is more than ``halt`` allows."""
    kind, v = halt
    return bad * 100 > v * size if kind == "share" else bad > v


def select(
    infos: dict[str, dict[str, Any]], pattern: str, board: str
) -> tuple[list[str], list[tuple[str, str]]]:
    """(nodes matching the glob ``pattern`` whose board is ``board``,
    [(node, its board)] of those that match on another board), each sorted."""
    targets, other = [], []
    for node in sorted(infos):
        if not fnmatch.fnmatchcase(node, pattern):
            continue
        b = infos[node].get("board")
        if b == board:
            targets.append(node)
        else:
            other.append((node, str(b)))
    return targets, other


def runs(status: Any, h: str) -> bool:
    """Whether a device's sys/ota status says it runs bundle ``h``, committed."""
    if not isinstance(status, dict):
        return False
    run = status.get("running") or {}
    return run.get("hash") == h and status.get("state") in ("committed", "idle")


# -- output


class Outcome:
    """One device's result: ``kind`` (COMMITTED, ALREADY, ROLLED_BACK,
    FAILED), ``detail`` (the version, or the reason), ``seconds`` to the
    verdict, ``sent_s`` of them the transfer (None: none was made), ``wire``
    (the bundle's bytes sent in puts, the bundle's bytes; None: no transfer)."""

    def __init__(
        self,
        node: str,
        kind: str,
        detail: str,
        seconds: float = 0.0,
        sent_s: float | None = None,
        wire: tuple[int, int] | None = None,
    ) -> None:
        self.node, self.kind, self.detail, self.seconds = node, kind, detail, seconds
        self.sent_s, self.wire = sent_s, wire

    def ok(self) -> bool:
        return self.kind in (COMMITTED, ALREADY)

    def line(self) -> str:
        if self.kind == ALREADY:
            return "%s: already running %s" % (self.node, self.detail)
        sent = "sent %d of %d bytes" % self.wire if self.wire else "sent"
        if self.kind == COMMITTED:
            line = "%s: committed %s in %d s" % (self.node, self.detail, round(self.seconds))
            if self.sent_s is not None:
                t = "%.1f" % self.sent_s if self.sent_s >= 10 else "%.2f" % self.sent_s
                line += " (%s in %s s)" % (sent, t)
            return line
        line = "%s: %s: %s" % (self.node, self.kind, self.detail)
        return line + " (%s)" % sent if self.wire else line


def summary(outcomes: list[Outcome], untouched: int, skipped: int) -> str:
    """The last line of a push: how many of each outcome, and what was left."""
    parts = []
    for kind in (COMMITTED, ALREADY, ROLLED_BACK, FAILED):
        parts.append("%d %s" % (sum(o.kind == kind for o in outcomes), kind))
    if untouched:
        parts.append("%d untouched (halted)" % untouched)
    if skipped:
        parts.append("%d skipped (another board)" % skipped)
    return ", ".join(parts)


def status_rows(
    infos: dict[str, Any],
    otas: dict[str, Any],
    pattern: str = "*",
    links: dict[str, dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """{"node", "board", "ota", "link"} for each node matching ``pattern``
    with a retained sys/info or sys/ota (``ota`` None: no ota service), by
    name; ``link`` its link's {"state", "since"} from ``links`` (None: the
    bridge has no link to it)."""
    nodes = sorted(n for n in set(infos) | set(otas) if fnmatch.fnmatchcase(n, pattern))
    return [
        {
            "node": n,
            "board": (infos.get(n) or {}).get("board"),
            "ota": otas[n] if isinstance(otas.get(n), dict) else None,
            "link": (links or {}).get(n),
        }
        for n in nodes
    ]


def _link(lk: dict[str, Any] | None, now: float) -> str:
    """The LINK column: "up", else the state and for how long ("down 3m")."""
    if lk is None:
        return "none"
    st = str(lk.get("state") or "?")
    since = lk.get("since")
    if st == "up" or not isinstance(since, (int, float)):
        return st
    s = max(0, int(now - since))
    return "%s %s" % (
        st,
        "%ds" % s if s < 120 else "%dm" % (s // 60) if s < 7200 else "%dh" % (s // 3600),
    )


def _short(h: Any) -> str:
    return h[:8] if isinstance(h, str) else "-"


def _bundle(d: Any) -> str:
    return "%s %s" % (d.get("version", "?"), _short(d.get("hash"))) if isinstance(d, dict) else "-"


def render_status(rows: list[dict[str, Any]], now: float | None = None) -> str:
    """The status table: a row per device. Its STATE is the device's last
    word; LINK says whether that is current (up) or how long it has not been."""
    now = time.time() if now is None else now
    out = [
        "%-20s %-10s %-12s %-8s %-7s %-9s %-22s %s"
        % ("NODE", "LINK", "VERSION", "HASH", "SLOT", "STATE", "TRIAL", "LAST FAILURE")
    ]
    for r in rows:
        st = r["ota"]
        lk = _link(r.get("link"), now)
        if st is None:
            out.append("%-20s %-10s %s" % (r["node"], lk, "no ota service"))
            continue
        run = st.get("running") or {}
        trial = st.get("trial")
        fail = st.get("last_failure")
        out.append(
            "%-20s %-10s %-12s %-8s %-7s %-9s %-22s %s"
            % (
                r["node"],
                lk,
                run.get("version", "?"),
                _short(run.get("hash")),
                run.get("slot") or "factory",
                st.get("state", "?"),
                _bundle(trial) + (" %ss" % trial["deadline_s"] if trial.get("deadline_s") else "")
                if isinstance(trial, dict)
                else "-",
                "%s: %s" % (_bundle(fail), fail.get("reason")) if isinstance(fail, dict) else "-",
            )
        )
    return "\n".join(out)
