"""The link's flash spool (docs/protocol.md, 14): every reliable entry the
link spools is appended here too, with the peer's acknowledgements, so that
readings survive a reboot; at boot the entries of earlier boots still
unacknowledged are sent again as HIST frames under their own provenance.

Imported only when a Link is given ``journal=<directory>``. Files
``<dir>/NNNNNNNN.j`` (numbered in writing order), each one boot's: a header
``EBJ1``, the sid's length (1 byte) and the sid, then records, appended in
blocks of ``block`` bytes (one buffer, the only RAM the journal holds):

  E seq(4) len(2) body      an entry (the encoded PUB/RET/UNRET body)
  A upto(4)                 this boot: every entry below upto is acknowledged
  C wall(8)                 this boot's Unix ms at its link clock 0
  O upto(4) n(1) sid(n)     an earlier boot's acknowledgement

A short or unknown record ends a file (a reboot in the middle of a write).
A file whose entries are all acknowledged is deleted; past ``size`` bytes in
all, the oldest file goes (its entries counted in ``dropped``).
"""

import os

from ..compat import asyncio, const, ms, wall_ms
from . import wire

_E = const(0x45)
_A = const(0x41)
_C = const(0x43)
_O = const(0x4F)
_MAGIC = b"EBJ1"
# An earlier boot: [sid, files, acked, wall, file index, pos, from, told, said];
# a file: [name, bytes, last seq, entries].
_FILES = const(1)
_ACKED = const(2)
_WALL = const(3)
_FI = const(4)
_POS = const(5)
_FROM = const(6)
_TOLD = const(7)
_SAID = const(8)  # the acknowledgement last written


def _u(b):
    return int.from_bytes(b, "big")


def _record(k, v, rest=b""):
    return bytes([k]) + v.to_bytes(4, "big") + rest


def _oack(o):
    b = o[0].encode()
    o[_SAID] = o[_ACKED]
    return _record(_O, o[_ACKED], bytes([len(b)]) + b)


def _records(f, size, fl, o, acks):
    """An earlier boot's file f (size bytes) read up to a short or unknown record:
    its entries into fl, its boot's acknowledgement and clock into o, others' into acks."""
    while True:
        h = f.read(5)
        if len(h) < 5 or h[0] not in (_E, _A, _C, _O):
            return
        v = _u(h[1:5])
        if h[0] == _E:
            n = f.read(2)
            if len(n) < 2 or f.seek(_u(n), 1) > size:
                return
            fl[2] = v
            fl[3] += 1
        elif h[0] == _A:
            o[_ACKED] = max(o[_ACKED], v)
        elif h[0] == _C:
            x = f.read(4)
            if len(x) == 4:
                o[_WALL] = (v << 32) | _u(x)
        else:
            n = f.read(1)
            s = f.read(n[0]).decode() if n else ""
            acks[s] = max(acks.get(s, 0), v)


class Journal:
    def __init__(self, path, sid, size=262144, block=4096):
        if block < 256 or size < 4 * block:
            raise ValueError("journal: block must be >= 256 bytes and size >= 4 blocks")
        self.dir = path
        self.sid = sid
        self.size = size
        self.seg = max(block, size // 8)  # a file is closed for appends past this
        self.buf = bytearray(block)
        self.mv = memoryview(self.buf)
        self.n = 0  # bytes in buf
        self.blast = 0  # the last entry's seq in buf (0: none)
        self.bent = 0  # entries in buf
        self.mine = []  # this boot's files
        self.cur = None  # the one appended to
        self.last = 0  # the last seq appended
        self.acked = 0  # everything below is acknowledged
        self.wall = None  # Unix ms at this boot's clock 0
        self.bytes = 0  # on flash, every file
        self.writes = 0
        self.written = 0
        self.dropped = 0
        self.olds = []
        self.oi = 0  # HIST: the earlier boot being sent
        self.hist = False  # HIST: the peer takes it this session
        self.flip = False
        self._mark = 0
        self._rf = None  # (name, file) open for reading
        w = wall_ms()
        if w is not None:
            self.wall = w - ms()
        try:
            os.stat(path)
        except OSError:
            os.mkdir(path)
        self.k = self._scan()

    # -- files -----------------------------------------------------------
    def _path(self, name):
        return self.dir + "/" + name

    def _open(self, name):
        r = self._rf
        if r is not None and r[0] == name:
            return r[1]
        self.close()
        try:
            f = open(self._path(name), "rb")
        except OSError:
            return None
        self._rf = (name, f)
        return f

    def close(self):
        """Close the file open for reading earlier boots (reopened when next
        needed); what is buffered for writing stays (``flush``)."""
        if self._rf is not None:
            self._rf[1].close()
            self._rf = None

    def _delete(self, fl, lst):
        r = self._rf
        if r is not None and r[0] == fl[0]:
            self.close()
        try:
            os.remove(self._path(fl[0]))
        except OSError:
            pass
        self.bytes -= fl[1]
        lst.remove(fl)
        if fl is self.cur:
            self.cur = None

    def _scan(self):
        """Read every file's records: earlier boots into olds (files fully
        acknowledged deleted); returns the next file number."""
        k = 0
        olds = []
        acks = {}
        for name in sorted(os.listdir(self.dir)):
            if len(name) != 10 or not name.endswith(".j"):
                continue
            try:
                k = max(k, int(name[:8]) + 1)
            except ValueError:
                continue
            with open(self._path(name), "rb") as f:
                size = f.seek(0, 2)
                f.seek(0)
                h = f.read(5)
                sid = f.read(h[4]).decode() if len(h) == 5 and h[:4] == _MAGIC else None
                fl = [name, size, 0, 0]
                self.bytes += size
                if sid is None or sid == self.sid:  # not ours, or a reused sid's
                    self.mine.append(fl)
                    self._delete(fl, self.mine)
                    continue
                o = None
                for x in olds:
                    if x[0] == sid:
                        o = x
                if o is None:
                    o = [sid, [], 0, None, 0, 0, 0, None, 0]
                    olds.append(o)
                o[_FILES].append(fl)
                _records(f, size, fl, o, acks)
        self.olds = olds
        for o in olds:
            o[_ACKED] = max(o[_ACKED], acks.get(o[0], 0))
            self._prune(o)
        self.olds = [o for o in olds if o[_FILES]]
        return k

    def _prune(self, o):
        """Delete the files of earlier boot o whose entries are all acknowledged."""
        fs = o[_FILES]
        i = 0
        while i < len(fs):
            if fs[i][2] < o[_ACKED] or not fs[i][3]:  # all acknowledged, or none there
                self._delete(fs[i], fs)
                if o[_FI] > i:
                    o[_FI] -= 1
                elif o[_FI] == i:
                    o[_POS] = 0
            else:
                i += 1

    def _write(self, chunks):
        """Append chunks to this boot's current file (a new one past seg
        bytes), dropping the oldest files while the total would pass size."""
        n = 64
        for c in chunks:
            n += len(c)
        while self.bytes + n > self.size:
            fl = None
            for o in self.olds:
                if o[_FILES]:
                    fl = o[_FILES][0]
                    lst = o[_FILES]
                    break
            if fl is None:
                for x in self.mine:
                    if x is not self.cur:
                        fl = x
                        lst = self.mine
                        break
            if fl is None:
                break
            self.dropped += fl[3]
            self._delete(fl, lst)
        self.olds = [o for o in self.olds if o[_FILES]]
        if self.cur is None or self.cur[1] >= self.seg:
            s = self.sid.encode()
            h = _MAGIC + bytes([len(s)]) + s
            if self.wall is not None:
                h += _record(_C, self.wall >> 32, (self.wall & 0xFFFFFFFF).to_bytes(4, "big"))
            for o in self.olds:  # earlier boots' acknowledgements, again
                if o[_ACKED]:
                    h += _oack(o)
            self.cur = ["%08d.j" % self.k, 0, 0, 0]
            self.k += 1
            self.mine.append(self.cur)
            chunks = [h] + chunks
        with open(self._path(self.cur[0]), "ab") as f:
            for c in chunks:
                f.write(c)
                self.cur[1] += len(c)
                self.bytes += len(c)
                self.written += len(c)
        self.writes += 1

    # -- this boot -------------------------------------------------------
    def _put(self, rec, body=None):
        n = len(rec) + (len(body) if body is not None else 0)
        if self.n + n > len(self.buf):
            self.flush()
        self.buf[self.n : self.n + len(rec)] = rec
        self.n += len(rec)
        if body is not None:
            self.mv[self.n : self.n + len(body)] = body
            self.n += len(body)

    def append(self, seq, body):
        """Journal entry ``seq`` (its encoded body)."""
        rec = _record(_E, seq, len(body).to_bytes(2, "big"))
        self.last = seq
        if len(rec) + len(body) > len(self.buf):  # larger than a block: alone
            self.flush()
            self._write([rec, body])
            self.cur[2] = seq
            self.cur[3] += 1
            return
        self._put(rec, body)
        self.blast = seq
        self.bent += 1

    def ack(self, upto):
        """The peer acknowledged every entry of this boot below ``upto``."""
        if upto <= self.acked:
            return
        self.acked = upto
        if self.last < upto:
            # Everything acknowledged: nothing needs the flash (the usual
            # case while a session is up: no write at all).
            self.n = self.bent = self.blast = 0
            for fl in list(self.mine):
                self._delete(fl, self.mine)
            for o in self.olds:
                o[_SAID] = 0  # their acknowledgements went with the files
            return
        self._put(_record(_A, upto))
        for fl in list(self.mine):
            if fl[2] < upto and fl[3]:
                self._delete(fl, self.mine)

    def clock(self, wall):
        """This boot's Unix ms at clock 0, learned (from the peer's)."""
        if self.wall is None and wall is not None:
            self.wall = wall
            self._put(_record(_C, wall >> 32, (wall & 0xFFFFFFFF).to_bytes(4, "big")))

    def flush(self):
        """Write what the buffer holds, and earlier boots' new acknowledgements."""
        chunks = []
        for o in self.olds:
            if o[_ACKED] > o[_SAID]:
                chunks.append(_oack(o))
        if self.n:
            chunks.append(self.mv[: self.n])
        if chunks:
            self._write(chunks)
            if self.bent:
                self.cur[2] = self.blast
                self.cur[3] += self.bent
        self.n = self.bent = self.blast = 0

    def tick(self, up):
        """Every few seconds: write the buffer while there is no session, or
        when its entries wait unacknowledged since the last tick; earlier
        boots' acknowledgements too."""
        old = False
        for o in self.olds:
            old = old or o[_ACKED] > o[_SAID]
        if old or (self.n and (not up or (self._mark and self._mark >= self.acked))):
            self.flush()
        self._mark = self.blast

    # -- earlier boots ---------------------------------------------------
    def _entry(self, o):
        """(seq, body, file index, pos after) of the next entry of earlier
        boot o to send, or None."""
        fs = o[_FILES]
        fi = o[_FI]
        pos = o[_POS]
        low = max(o[_ACKED], o[_FROM])
        while fi < len(fs):
            f = self._open(fs[fi][0])
            if f is not None:
                if pos == 0:
                    f.seek(4)
                    pos = 5 + f.read(1)[0]
                f.seek(pos)
                while True:
                    h = f.read(5)
                    if len(h) < 5 or h[0] not in (_E, _A, _C, _O):
                        break
                    if h[0] == _E:
                        n = f.read(2)
                        body = f.read(_u(n)) if len(n) == 2 else b""
                        if len(n) < 2 or len(body) < _u(n):
                            break
                        if _u(h[1:5]) >= low:
                            return _u(h[1:5]), body, fi, f.tell()
                    elif h[0] == _C:
                        f.read(4)
                    elif h[0] == _O:
                        n = f.read(1)
                        f.read(n[0] if n else 0)
            fi += 1
            pos = 0
        return None

    def next_frame(self, link, any_turn=False):
        """The next HIST (or SKIP [n, sid] before it), or None; every other
        call only, unless any_turn (then current data goes between)."""
        j = self
        j.flip = not j.flip
        if not j.hist or not (j.flip or any_turn):
            return None
        while j.oi < len(j.olds):
            o = j.olds[j.oi]
            e = j._entry(o)
            if e is None:
                j.oi += 1
                continue
            seq = e[0]
            if o[_TOLD] != seq:  # numbers before it are not here: lost for good
                o[_TOLD] = seq
                return wire.encode(wire.SKIP, [seq, o[0]])
            o[_FI] = e[2]
            o[_POS] = e[3]
            o[_TOLD] = seq + 1
            b = wire.encode(wire.HIST, [o[0], seq, o[_WALL]], None, e[1])
            if len(b) <= link.opts.max_len:
                link.count("hist_sent")
                return b
            link.count("oversize_out")  # lost: the next SKIP says so
        return None

    def on_old(self, link, t, obj):
        """ACK [n, sid] or RESEND [n, sid]: for an earlier boot of ours."""
        j = self
        n = obj[0]
        if type(n) is not int:
            return link.count("bad_frames")
        for i in range(len(j.olds)):
            o = j.olds[i]
            if o[0] != obj[1]:
                continue
            if t == wire.ACK:
                if n > o[_ACKED]:
                    o[_ACKED] = n  # written by the next tick, files pruned now
                    j._prune(o)
                    if not o[_FILES]:
                        j.olds.pop(i)
                        if j.oi > i:
                            j.oi -= 1
            else:
                link.count("resends")
                o[_FI] = o[_POS] = 0
                o[_FROM] = o[_TOLD] = n
                j.oi = min(j.oi, i)
                link._wake.set()
            return

    def pending(self):
        """Entries of earlier boots still unacknowledged (files' count)."""
        k = 0
        for o in self.olds:
            for fl in o[_FILES]:
                k += fl[3]
        return k

    def stats(self):
        return {
            "bytes": self.bytes,
            "files": len(self.mine) + sum([len(o[_FILES]) for o in self.olds]),
            "buffered": self.n,
            "writes": self.writes,
            "written": self.written,
            "dropped": self.dropped,
            "old_boots": len(self.olds),
            "old_entries": self.pending(),
        }


# -- the link's side (functions over the Link, as tx and rx) ----------------
def up(link, peer):
    """A session came up: learn this boot's clock from the peer's if we have
    none, and send earlier boots' entries again from the oldest
    unacknowledged (if the peer takes HIST)."""
    j = link._journal
    w = peer.get("wall")
    m = peer.get("ms")
    if j.wall is None and type(w) is int and type(m) is int:
        j.clock(w + m - ms())
    caps = peer.get("caps")
    j.hist = link._acking and type(caps) is list and wire.CAP_HIST in caps
    j.oi = 0
    for o in j.olds:
        o[_FI] = o[_POS] = o[_FROM] = 0
        o[_TOLD] = None
    if not link._acking:  # nobody will acknowledge: tx.start dropped what waits
        j.ack(link.tx_seq)


async def flusher(link, period=2.0):
    """The journal's timer (runs as long as the link spools)."""
    while True:
        await asyncio.sleep(period)
        link._journal.tick(link.status == wire.UP)
