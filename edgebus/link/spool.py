"""The link's spool: sequenced frame bodies waiting to be sent or to be
acknowledged, encoded, in one preallocated byte ring.

Why bytes and not objects: a board's heap holds a few hundred small objects
badly (each costs a GC block or more, and they fragment the heap), while one
bytearray allocated at boot costs exactly its size and never moves. An entry
is a 10-byte header and the body: sequence number (4 bytes), flags (1),
length (3: a host's links carry bodies up to 64 KB), the spool clock in
seconds mod 65536 when it was put (2, for the age of the oldest entry). An
entry never wraps around the end of the ring; the space it would not fit in
is skipped (``_end`` marks it).
"""

from ..compat import const, now

LATEST = const(0x8000)  # only the newest value matters: never resent
DEAD = const(0x4000)  # gone (sent latest, or dropped): skipped, freed with the head
SENT = const(0x2000)  # sent at least once: sending it again is a retransmission
_LEN = const(0xFFFFFF)  # the largest body an entry can hold
_H = const(10)


class Spool:
    """A ring of ``size`` bytes (or the given bytearray: a board allocates it
    first, while one large block is still easy to find). ``policy`` when
    full: "drop_oldest" evicts the oldest entries, "drop_newest" refuses the
    new one."""

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
        return self.buf[o + 4] << 8

    def _len(self, o):
        b = self.buf
        return (b[o + 5] << 16) | (b[o + 6] << 8) | b[o + 7]

    def _set_flags(self, o, f):
        self.buf[o + 4] = f >> 8

    def _after(self, o):
        o += _H + self._len(o)
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
        n = 0
        for x in parts:
            if x is not None:
                n += len(x)
        need = _H + n
        if n > _LEN or need > len(self.buf):
            self.refused += 1
            self.last = -1
            return False
        while True:
            o = self._room(need)
            if o >= 0:
                break
            if self.policy != "drop_oldest":
                self.refused += 1
                self.last = -1
                return False
            if self.flags_at(self.head) & DEAD == 0:
                self.evicted += 1
                if self.head == self.cur and self.unsent:
                    self.dropped_unsent += 1
            self.pop()
        b = self.buf
        b[o] = (seq >> 24) & 0xFF
        b[o + 1] = (seq >> 16) & 0xFF
        b[o + 2] = (seq >> 8) & 0xFF
        b[o + 3] = seq & 0xFF
        b[o + 4] = flags >> 8
        b[o + 5] = n >> 16
        b[o + 6] = (n >> 8) & 0xFF
        b[o + 7] = n & 0xFF
        t = int(now()) & 0xFFFF
        b[o + 8] = t >> 8
        b[o + 9] = t & 0xFF
        p = o + _H
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

    def pop(self):
        """Free the oldest entry (the send cursor moves past it)."""
        o = self.head
        if o == self.last:
            self.last = -1
        nxt = self._after(o)
        self.used -= _H + self._len(o)
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

    # -- sending -----------------------------------------------------------
    def peek(self):
        """Offset of the next entry to send, or -1."""
        return self.cur if self.unsent else -1

    def body(self, o):
        """The body at ``o``, a view into the ring (valid until the next put)."""
        return self.mv[o + _H : o + _H + self._len(o)]

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
        return (int(now()) - ((b[o + 8] << 8) | b[o + 9])) & 0xFFFF

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
