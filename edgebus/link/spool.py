"""The link's spool: sequenced frame bodies waiting to be sent or to be
acknowledged, encoded, in one preallocated byte ring.

Why bytes and not objects: a board's heap holds a few hundred small objects
badly (each costs a GC block or more, and they fragment the heap), while one
bytearray allocated at boot costs exactly its size and never moves. An entry
is a header of 8 bytes (10 past 127 bytes of data): sequence number (4),
flags and table index (1), the spool clock in seconds mod 65536 when it was
put (2, for the age of the oldest entry), data length (1, or 3 with the top
bit set); then the data. An entry never wraps around the end of the ring;
the space it would not fit in is skipped (``_end`` marks it).

The data is the body as sent, or (table index > 0) only the numbers in its
JSON: a sequenced body's type byte and the JSON around its runs of
``-.0-9`` (its topic, keys, strings) are a template kept once in a bounded
table, so a reading spools as its digits, comma-separated. The template and
the sequence number give the body back byte for byte; a body no template
fits (binary, too long, table full) is stored as sent, and so is every body
while the spool holds less than a sixteenth of its size or 2 KB.
"""

from ..compat import const, now

# (number runs, the gaps between them), compiled at the first backlog, not
# at import: a board's heap at READY holds no more for templates (the
# emulated board's 64 KB). False: a port without re, every body as sent.
_RX = None

LATEST = const(0x8000)  # only the newest value matters: never resent
DEAD = const(0x4000)  # gone (sent latest, or dropped): skipped, freed with the head
SENT = const(0x2000)  # sent at least once: sending it again is a retransmission
_LEN = const(0x7FFFFF)  # the largest body an entry can hold
_H = const(8)  # header bytes with a one-byte length
_TI = const(0x1F)  # flags byte: the table index (0: the body as sent)
_TMAX = const(1024)  # longer JSON is stored as sent (copying it to scan it costs a board heap)
_SEG = const(16)  # heap bytes a template segment costs beside its length (an object)


def _press(size):
    """Bytes held from which bodies are templated: a sixteenth of the ring,
    or half of a small one up to 2 KB. Below it a session is up and ACKs free
    what it sends; templating costs a board ~20 us a reading, worth it only
    while a backlog builds (an outage)."""
    return size >> 4 if size >= 32768 else min(size >> 1, 2048)


class Spool:
    """A ring of ``size`` bytes (or the given bytearray: a board allocates it
    first, while one large block is still easy to find). ``policy`` when
    full: "drop_oldest" evicts the oldest entries, "drop_newest" refuses the
    new one. The template table takes at most 31 templates and ``size // 8``
    heap bytes (``table_bytes()``); one no entry uses makes room for a new one."""

    # Where templating starts (bytes held); None: from the ring's size (_press).
    _pressed = None

    def __init__(self, size, policy="drop_oldest"):
        if policy not in ("drop_oldest", "drop_newest"):
            raise ValueError("spool policy must be 'drop_oldest' or 'drop_newest'")
        buf = size if type(size) is bytearray else bytearray(size)
        if len(buf) < 64:
            raise ValueError("spool of %d bytes is too small" % len(buf))
        self.buf = buf
        self.mv = memoryview(self.buf)
        self.policy = policy
        self.head = 0  # oldest entry
        self.tail = 0  # where the next entry goes
        self.cur = 0  # next entry to send
        self._end = -1  # while the tail has wrapped: where the upper part ends
        self.n = 0  # entries held
        self.unsent = 0  # entries from cur to the tail
        self.used = 0  # bytes held, skipped space included
        self.last = -1  # where the latest put went, while it is there
        # Templates, made at the first backlog (nothing on the heap before):
        # slot i (table index i + 1) is [JSON with 0xFF holes, entries using
        # it, heap bytes, type byte, segments]; _tix: type byte -> JSON -> slot.
        self._tpl = None
        self._tix = None
        # Counters: evicted before acknowledgement (never sent: also in
        # dropped_unsent), refused (drop_newest or too big).
        self.evicted = 0
        self.dropped_unsent = 0
        self.refused = 0

    # -- entry fields ------------------------------------------------------
    def seq_at(self, o):
        b = self.buf
        return (b[o] << 24) | (b[o + 1] << 16) | (b[o + 2] << 8) | b[o + 3]

    def flags_at(self, o):
        return (self.buf[o + 4] & 0xE0) << 8

    def _set_flags(self, o, f):
        b = self.buf
        b[o + 4] = (b[o + 4] & _TI) | (f >> 8)

    def _data(self, o):
        """(offset, length) of the entry's data."""
        b = self.buf
        n = b[o + 7]
        if n < 0x80:
            return o + _H, n
        return o + _H + 2, ((n & 0x7F) << 16) | (b[o + 8] << 8) | b[o + 9]

    def _after(self, o):
        p, n = self._data(o)
        o = p + n
        return 0 if o == self._end else o

    # -- adding and freeing ------------------------------------------------
    def _room(self, need):
        """Offset where ``need`` bytes fit now, or -1."""
        size = len(self.buf)
        if self.n == 0:
            self.head = self.tail = self.cur = 0
            self._end = -1
            self.used = 0
            return 0 if need <= size else -1
        if self._end < 0:  # entries in [head, tail)
            if self.tail + need <= size:
                return self.tail
            if need <= self.head:  # wrap: the rest of the end is skipped
                self._end = self.tail
                self.used += size - self.tail
                self.tail = 0
                return 0
            return -1
        return self.tail if self.tail + need <= self.head else -1

    def put(self, seq, body, flags=0):
        """Add a body, a buffer or a tuple of buffers (its parts in order, None
        for none: wire.parts, copied in one by one); False if refused
        (drop_newest, or larger than the ring)."""
        parts = body if type(body) is tuple else (body,)
        p = self._pressed
        if self.used >= (_press(len(self.buf)) if p is None else p):
            ti, data = self._pack(seq, parts)
            if ti:
                parts = (data,)
        else:
            ti = 0
        n = 0
        for x in parts:
            if x is not None:
                n += len(x)
        need = (_H if n < 0x80 else _H + 2) + n
        if n > _LEN or need > len(self.buf):
            return self._refuse(ti)
        while True:
            o = self._room(need)
            if o >= 0:
                break
            if self.policy != "drop_oldest":
                return self._refuse(ti)
            if self.flags_at(self.head) & DEAD == 0:
                self.evicted += 1
                if self.head == self.cur and self.unsent:
                    self.dropped_unsent += 1
            self.pop()
        p = self._head(o, seq, (flags >> 8) | ti, n)
        for x in parts:
            if x is not None:
                self.mv[p : p + len(x)] = x
                p += len(x)
        if not self.unsent:
            self.cur = o
        self.tail = o + need
        self.last = o
        self.n += 1
        self.unsent += 1
        self.used += need
        return True

    def _head(self, o, seq, f, n):
        """Write an entry's header at ``o``; where its data goes."""
        b = self.buf
        b[o] = (seq >> 24) & 0xFF
        b[o + 1] = (seq >> 16) & 0xFF
        b[o + 2] = (seq >> 8) & 0xFF
        b[o + 3] = seq & 0xFF
        b[o + 4] = f
        t = int(now()) & 0xFFFF
        b[o + 5] = t >> 8
        b[o + 6] = t & 0xFF
        if n < 0x80:
            b[o + 7] = n
            return o + _H
        b[o + 7] = 0x80 | (n >> 16)
        b[o + 8] = (n >> 8) & 0xFF
        b[o + 9] = n & 0xFF
        return o + _H + 2

    def _refuse(self, ti):
        if ti:
            self._tpl[ti - 1][1] -= 1
        self.refused += 1
        self.last = -1
        return False

    def pop(self):
        """Free the oldest entry (the send cursor moves past it)."""
        o = self.head
        if o == self.last:
            self.last = -1
        ti = self.buf[o + 4] & _TI
        if ti:
            self._tpl[ti - 1][1] -= 1
        nxt = self._after(o)
        self.used -= self._size(o)
        if nxt == 0 and self._end >= 0:
            self.used -= len(self.buf) - self._end
            self._end = -1
        if self.cur == o and self.unsent:
            self.unsent -= 1
            self.cur = nxt
        self.head = nxt
        self.n -= 1
        if self.n == 0:
            self.unsent = 0

    def ack(self, upto):
        """Free every entry numbered below ``upto``; how many were live."""
        k = 0
        while self.n and self.seq_at(self.head) < upto:
            if self.flags_at(self.head) & DEAD == 0:
                k += 1
            self.pop()
        return k

    def _size(self, o):
        p, n = self._data(o)
        return p + n - o

    # -- the template table ------------------------------------------------
    def table_bytes(self):
        """Heap bytes the templates take (counted, not kept: an attribute
        more per spool is heap a board holds at READY)."""
        return sum(e[2] for e in self._tpl if e is not None) if self._tpl else 0

    def _pack(self, seq, parts):
        """(table index, numbers) for a body a template fits, else (0, None):
        its head is the type byte and ``seq``'s low 16
        bits, and its JSON the template with the numbers in its holes."""
        global _RX
        h = parts[0]
        if _RX is False or h is None or len(h) < 3 or h[0] & 0xC0 != 0x40:
            return 0, None
        if (h[1] << 8 | h[2]) != seq & 0xFFFF:
            return 0, None
        if len(parts) == 1:
            j = h[3:]
        elif len(h) == 3 and len(parts) == 3 and parts[2] is None:
            j = parts[1]
        else:
            return 0, None
        if len(j) > _TMAX:
            return 0, None
        if type(j) is not bytes:
            j = bytes(j)  # MicroPython's re reads no memoryview
        if _RX is None:
            try:
                import re

                # number runs: what varies between readings
                _RX = (re.compile(b"[-.0-9]+"), re.compile(b"[^-.0-9]+"))
            except ImportError:
                _RX = False
                return 0, None
        if self._tix is None:
            self._tpl, self._tix = [], {}
        # Two C calls and two objects a reading: the board's CPU and heap.
        skel = _RX[0].sub(b"\xff", j)  # never in UTF-8: a hole, unambiguous
        data = _RX[1].sub(b",", j)
        d = self._tix.get(h[0])
        i = d.get(skel) if d is not None else None
        n = len(data)
        a = 1 if n and data[0] == 44 else 0  # the gaps before and after the numbers
        z = 1 if n > a and data[-1] == 44 else 0
        k = skel.count(b"\xff") if i is None else len(self._tpl[i][4]) - 1  # holes
        if data.count(b",") - a - z != k - 1 if k else n != a + z:
            return 0, None  # runs and holes differ: a 0xFF in the body (not UTF-8)
        if i is None:
            i = self._learn(h[0], skel)
            if i < 0:
                return 0, None
        self._tpl[i][1] += 1
        return i + 1, memoryview(data)[a : n - z]

    def _learn(self, t, skel):
        """The slot of a new template (type byte ``t``, JSON ``skel`` with a
        0xFF per number), or -1: the table is full of templates in use."""
        segs = tuple(skel.split(b"\xff"))
        cost = len(skel) + _SEG * len(segs)
        tpl = self._tpl
        cap = len(self.buf) // 8
        if self.table_bytes() + cost > cap or len(tpl) >= _TI:
            for i in range(len(tpl)):  # forget what no entry uses
                e = tpl[i]
                if e is not None and not e[1]:
                    del self._tix[e[3]][e[0]]
                    tpl[i] = None
            if self.table_bytes() + cost > cap:
                return -1
        for i in range(len(tpl)):
            if tpl[i] is None:
                break
        else:
            if len(tpl) >= _TI:
                return -1
            i = len(tpl)
            tpl.append(None)
        tpl[i] = [skel, 0, cost, t, segs]
        if t not in self._tix:
            self._tix[t] = {}
        self._tix[t][skel] = i
        return i

    # -- sending -----------------------------------------------------------
    def peek(self):
        """Offset of the next entry to send, or -1."""
        return self.cur if self.unsent else -1

    def body(self, o):
        """The body at ``o``: a view into the ring (valid until the next put),
        or, from a template, the bytes it gives back."""
        p, n = self._data(o)
        ti = self.buf[o + 4] & _TI
        if not ti:
            return self.mv[p : p + n]
        e = self._tpl[ti - 1]
        seq = self.seq_at(o)
        out = [bytes((e[3], (seq >> 8) & 0xFF, seq & 0xFF))]
        segs = e[4]
        if n:
            nums = bytes(self.mv[p : p + n]).split(b",")
            for i in range(len(nums)):
                out.append(segs[i])
                out.append(nums[i])
        out.append(segs[-1])
        return b"".join(out)

    def advance(self, free=False, kill=False):
        """The entry at the cursor is sent (or skipped): mark it SENT, DEAD
        if ``kill``, free it if ``free`` (it is then the oldest)."""
        o = self.cur
        self.unsent -= 1
        self.cur = self._after(o)
        if free:
            self.pop()
        else:
            self._set_flags(o, self.flags_at(o) | SENT | (DEAD if kill else 0))

    def rewind(self, seq=0):
        """Send again from the first entry numbered ``seq`` or later that was
        already sent; returns the number of entries to send now."""
        o = self.head
        k = self.n - self.unsent  # entries before the cursor
        while k and self.seq_at(o) < seq:
            o = self._after(o)
            k -= 1
        self.cur = o
        self.unsent += k
        return self.unsent

    def kill_unsent(self, mask):
        """Mark DEAD every unsent entry whose flags have any of ``mask`` (all
        if mask is 0); returns how many live ones."""
        o = self.cur
        k = 0
        for _ in range(self.unsent):
            f = self.flags_at(o)
            if not f & DEAD and (mask == 0 or f & mask):
                self._set_flags(o, f | DEAD)
                k += 1
            o = self._after(o)
        return k

    def first_live(self):
        """Sequence number of the first live entry from the cursor, or None."""
        o = self.cur
        for _ in range(self.unsent):
            if not self.flags_at(o) & DEAD:
                return self.seq_at(o)
            o = self._after(o)
        return None

    def oldest_age(self):
        """Seconds since the oldest entry was put (mod 18 h), or None."""
        if not self.n:
            return None
        b = self.buf
        o = self.head
        return (int(now()) - ((b[o + 5] << 8) | b[o + 6])) & 0xFFFF

    def stats(self):
        return {
            "capacity": len(self.buf),
            "bytes": self.used,
            "depth": self.n,
            "unsent": self.unsent,
            "oldest_age": self.oldest_age(),
            "evicted": self.evicted,
            "dropped_unsent": self.dropped_unsent,
            "refused": self.refused,
        }
