"""Relayed readings keep their device's identity, and a peer link loses
nothing to a crash (docs/protocol.md 7, "Relayed identity").

At the site: a record relayed over a [[peer]] link whose ``relays`` names
its device takes the device's node, boot and number (vouch). At the
gateway: a Resender keeps, per device boot, the highest number the peer has
acknowledged (all below it too) in a small file in the state directory, and
after a restart gives the peer link again every logged reading after it."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from edgebus import topic
from edgebus.link import replay
from edgebus.tlog import (
    TAIL_BYTES,
    list_segments,
    read_log,
    read_segment,
    sealed_files,
    write_atomically,
)
from edgebus.values import FrozenDict, Message, Origin

if TYPE_CHECKING:
    from edgebus.bridge.config import Peer
    from edgebus.link.link import Link

log = logging.getLogger("edgebus.bridge")

# The acknowledgements are folded in and the marks saved at most this often.
SAVE_EVERY = 0.5
# The resend gives the peer link more only while its spool is under this share.
SPOOL_SHARE = 0.5
# Records read from the log between two turns of the event loop.
YIELD_EVERY = 1000

Boot = tuple[str, str]  # (device node, its boot's sid)


def trust(peers: list[Peer]) -> dict[str, list[tuple[Any, ...]]]:
    """link_id -> the node patterns (as one-level topic keys) whose identity
    that peer may claim, for each [[peer]] with ``relays``."""
    return {
        "peer:" + p.node: [topic.pattern(r, "+", "#")[1] for r in p.relays]
        for p in peers
        if p.relays
    }


def vouch(rec: dict[str, Any], relays: dict[str, list[tuple[Any, ...]]]) -> bool | None:
    """Give log record ``rec`` its device's identity (peer_node, peer_sid,
    seq from extra's src, src_sid, src_seq; no src_seq for a retained fact
    from a snapshot, unnumbered at its first hop too) when its peer link may
    relay for that node. True if it did, False if the claim was refused (not trusted
    or malformed), None when the record claims nothing."""
    x = rec.get("extra")
    if not x:
        return None
    x.pop("hop_sid", None)  # ours alone (below), never a sender's
    if "src_sid" not in x:
        return None
    pats = relays.get(rec.get("link_id") or "")
    node, sid, seq = x.get("src"), x.get("src_sid"), x.get("src_seq")
    if (
        not pats
        or type(node) is not str
        or type(sid) is not str
        or (seq is not None and type(seq) is not int)  # None: a snapshot's fact
        or not any(topic.matches(p, (node,)) for p in pats)
    ):
        return False
    x["hop_sid"] = rec["peer_sid"]  # the peer's boot, whose number extra's seq is (hop_seqs)
    rec["peer_node"], rec["peer_sid"], rec["seq"] = node, sid, seq
    return True


def hop_seqs(log_dir: str, link_ids: set[str]) -> dict[tuple[str, str], int]:
    """``{(peer link id, the peer's boot): the highest number of that link}``
    over the relayed records logged under their devices (vouch) in the newest
    TAIL_BYTES of the log: what last_seqs tells of a direct link, for a
    restart (telemetry.health.resume_links)."""
    out: dict[tuple[str, str], int] = {}
    covered = 0
    files = sealed_files(log_dir)
    for segment in sorted(files, reverse=True):
        if covered >= TAIL_BYTES:
            break
        try:
            covered += os.path.getsize(files[segment][0])
        except FileNotFoundError:  # removed by retention meanwhile
            continue
        for _, r in read_segment(log_dir, segment, decode_payload=False):
            x = r["extra"]
            if r["link_id"] not in link_ids or not x:
                continue
            sid, n = x.get("hop_sid"), x.get("seq")
            if type(sid) is str and type(n) is int and n > out.get((r["link_id"], sid), -1):
                out[(r["link_id"], sid)] = n
    return out


def identity(origin: Any) -> tuple[str, str, int] | None:
    """(node, boot sid, number) of the device a message came from over links,
    or None (host traffic, or not known)."""
    if origin.kind != "link":
        return None
    x = origin.extra or {}
    if "src" in x:
        r = (x.get("src"), x.get("src_sid"), x.get("src_seq"))
    else:
        r = (origin.peer_node, origin.peer_sid, x.get("seq"))
    if type(r[0]) is str and type(r[1]) is str and type(r[2]) is int:
        return r  # type: ignore[return-value]
    return None


def _message(rec: dict[str, Any]) -> Message:
    """A logged record as the Message its link once exported."""
    o = Origin(
        "link",
        None,
        rec["principal"],
        rec["link_id"],
        rec["peer_node"],
        rec["peer_sid"],
        rec["generation"],
        FrozenDict(rec["extra"] or {}),
    )
    return Message(tuple(rec["topic"]), rec["payload"], o)


class Resender:
    """For one peer link of a bridge with a log: what the peer acknowledged,
    per device boot, saved at ``path``; run() gives the link again every
    logged reading the peer may lack, then keeps the file current."""

    def __init__(self, link: Link, log_dir: str, path: str) -> None:
        self.link = link
        self.log_dir = log_dir
        self.path = path
        self.marks: dict[Boot, int] = {}  # every number up to it acknowledged
        # The log position the marks start at (a list: JSON); None: no file
        # yet, so the log holds only what a run without marks relayed.
        self.since: list[int] | None = None
        try:
            with open(path) as f:
                d = json.load(f)
            for node, sid, n in d["acked"]:
                self.marks[(node, sid)] = n
            self.since = [int(x) for x in d["since"]][:2]
        except FileNotFoundError:
            pass
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning(
                "%s: %s unreadable (%s): every logged reading is resent", link.link_id, path, e
            )
            self.marks, self.since = {}, [0, 0]
        self.saved = dict(self.marks)
        # (link seq, boot, number) of each reading spooled, oldest first
        self.pending: deque[tuple[int, Boot, int]] = deque()
        self.resent = 0
        link.on_export = self.exported

    def exported(self, seq: int, item: Any) -> None:
        """Link.on_export: a reading spooled as ``seq``."""
        who = identity(item.origin)
        if who is not None:
            self.pending.append((seq, (who[0], who[1]), who[2]))

    def fold(self) -> dict[Boot, int]:
        """The peer's acknowledgements into the marks; returns what to save:
        per boot the highest number acknowledged, but below the lowest still
        pending (a resent reading can be older than a live one)."""
        acked = self.link.tx_acked
        p = self.pending
        m = self.marks
        while p and p[0][0] < acked:
            _, k, n = p.popleft()
            if n > m.get(k, -1):
                m[k] = n
        out = dict(m)
        for _, k, n in p:
            if k in out and out[k] >= n:
                out[k] = n - 1
        return out

    def save(self, marks: dict[Boot, int]) -> None:
        acked = [[k[0], k[1], n] for k, n in sorted(marks.items())]
        data = json.dumps({"since": self.since, "acked": acked}).encode()
        write_atomically(self.path, self.path + ".tmp", lambda f: f.write(data))
        self.saved = marks

    async def resend(self) -> int:
        """Give the link every reading of the log from ``since`` on (its
        sealed segments: what the last runs logged) after its boot's mark,
        paced by the spool's room; marks of boots the log no longer holds
        are forgotten. Returns how many."""
        link = self.link
        link.start()  # the export rules, resolved for the peer
        if self.since is None:
            # The first run with marks (a new gateway, or one from before
            # them): what its log holds now is not given again; from here on
            # nothing is lost.
            ids = list_segments(self.log_dir)
            self.since = [ids[-1] + 1 if ids else 0, 0]
            self.save(self.marks)
            return 0
        seen: set[Boot] = set()
        n = 0
        t0 = time.monotonic()
        for i, (_, rec) in enumerate(read_log(self.log_dir, start=(self.since[0], self.since[1]))):
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)  # a long log: the links go on meanwhile
            if rec["origin_kind"] != "link":
                continue
            node, sid, seq = rec["peer_node"], rec["peer_sid"], rec["seq"]
            if type(node) is not str or type(sid) is not str or type(seq) is not int:
                continue
            k = (node, sid)
            seen.add(k)
            if seq <= self.marks.get(k, -1):
                continue
            while True:
                sp = link.spool_stats()
                if sp["bytes"] < SPOOL_SHARE * sp["capacity"]:
                    break
                await asyncio.sleep(0.05)
            if replay.offer(link, _message(rec)):
                n += 1
        for k in list(self.marks):
            if k not in seen:
                del self.marks[k]
        self.resent = n
        log.info(
            "%s: %d logged reading(s) given again (%d device boot(s) in the log) in %.2f s",
            link.link_id,
            n,
            len(seen),
            time.monotonic() - t0,
        )
        return n

    async def run(self) -> None:
        """Resend, then fold the acknowledgements in and save what moved,
        every SAVE_EVERY s, until cancelled (and once more then)."""
        try:
            await self.resend()
            while True:
                self._keep()
                await asyncio.sleep(SAVE_EVERY)
        finally:
            self._keep()

    def _keep(self) -> None:
        m = self.fold()
        if m != self.saved:
            try:
                self.save(m)
            except OSError as e:
                log.warning("%s: cannot save %s: %s", self.link.link_id, self.path, e)


def resender_path(state_dir: str, peer: str) -> str:
    """Where a peer link's acknowledged marks live."""
    return os.path.join(state_dir, "relayed-%s.json" % peer)
