"""An update's transfer into the slot the device is not running: the manifest,
the files chunk by chunk straight to flash, their SHA-256 checks.

Loaded by the sys/ota service for a transfer and unloaded after it
(firmware.transient): its code is not resident while the device runs. What it
holds during a transfer is the file count, one manifest entry and one chunk
(a compressed chunk: its decoder's window and tables besides, ~3 KB, while it
is written); files are appended on flash, so a transfer resumes from what the
flash has after a broken session, a reboot or a power cut. A file the device
already holds with the manifest's SHA-256 (its running bundle, or factory
modules installed as files) is copied on flash instead of sent (copy).
"""

import hashlib
import json
import os
import struct
import sys
from binascii import hexlify

from firmware import write_atomic

MANIFEST = "ota.jsonl"
STAGE = "stage.json"
MAX_MANIFEST = 16384
MAX_FILES = 200
ZBIT = 0x8000  # a put's file index with this bit: its data is raw deflate (put)
WBITS = 10  # the decoder's window: 1 KB (docs/protocol.md section 18)
# Heap free at begin below which the device takes plain puts only: the decoder
# needs ~3 KB in three blocks a chunk, which a heap at its edge (the emulated
# board's 64 KB: ~16 KB free in a session) often cannot find.
DEFLATE_FREE = 24576
COPY_BYTES = 32768  # bytes of files one copy call reads at most: a short call
_PATH_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-/"


class Refused(ValueError):
    """What the call fails with: one line for the host."""


def size(path):
    try:
        return os.stat(path)[6]
    except OSError:
        return 0


def blocks(path):
    """The file's bytes, 512 at a time, as views of one buffer (each valid
    until the next): a flash file is read without a file-sized block."""
    buf = bytearray(512)
    mv = memoryview(buf)
    with open(path, "rb") as f:
        while True:
            n = f.readinto(buf)
            if not n:
                return
            yield mv[:n]


def sha256_file(path):
    h = hashlib.sha256()
    for b in blocks(path):
        h.update(b)
    return hexlify(h.digest()).decode()


def rmtree(path):
    """Remove path and everything under it (MicroPython has no shutil)."""
    try:
        entries = list(os.ilistdir(path))
    except OSError:
        return
    for e in entries:
        p = path + "/" + e[0]
        if e[1] == 0x4000:
            rmtree(p)
        else:
            os.remove(p)
    os.rmdir(path)


def makedirs(path):
    d = ""
    for part in path.split("/"):
        d = d + "/" + part if d else part
        try:
            os.mkdir(d)
        except OSError:
            pass  # exists


def check_path(p):
    if (
        type(p) is not str
        or not p
        or p[0] == "/"
        or ".." in p
        or "//" in p
        or not (p.endswith(".mpy") or p.endswith(".py") or p.endswith(".json"))
    ):
        raise Refused("manifest: unsafe or unknown file path %r" % (p,))
    for c in p:
        if c not in _PATH_CHARS:
            raise Refused("manifest: unsafe or unknown file path %r" % (p,))


class Transfer:
    """One bundle being received into dir base + slot. Of the manifest it
    holds the file count and one entry at a time (read again from flash):
    parsed whole, ~50 files took ~10 KB of a 32-bit board's heap."""

    def __init__(self, base, slot, board):
        self.base = base
        self.slot = slot
        self.dir = base + slot
        self.board = board
        self.want = None  # begin's {"version", "hash", "size", "slot"}
        self.n = None  # files in the manifest, once it checks out
        self.entry = None  # (index, path, size, sha256 hex): the last one read

    def stage_path(self):
        return self.base + STAGE

    def begin(self, p):
        """Start or resume; the byte counts the device has, per file."""
        if type(p) is not dict:
            raise Refused("begin takes {version, hash, size}")
        h, n, v = p.get("hash"), p.get("size"), p.get("version")
        if type(h) is not str or len(h) != 64 or type(n) is not int or type(v) is not str:
            raise Refused("begin takes {version: str, hash: 64 hex digits, size: int}")
        if not 0 < n <= MAX_MANIFEST:
            raise Refused("manifest of %d bytes: at most %d" % (n, MAX_MANIFEST))
        try:
            with open(self.stage_path()) as f:
                old = json.load(f)
        except (OSError, ValueError):
            old = None
        self.want = {"version": v, "hash": h, "size": n, "slot": self.slot}
        if old != self.want:
            rmtree(self.dir)  # another bundle was staged here: start afresh
            makedirs(self.dir)
            write_atomic(self.stage_path(), json.dumps(self.want))
        self.n = self.entry = None
        mp = self.dir + "/" + MANIFEST
        have = [size(mp)]
        if have[0] == n:
            self._manifest(mp)
            for path, sz, _h in self.entries():
                have.append(min(size(self.dir + "/" + path), sz))
        r = {"slot": self.slot, "have": have, "copy": True, "free": _free(self.base)}
        import gc

        try:
            gc.collect()
            # The whole GC heap: a bundle's .mpy code loads into it on the
            # trial boot, so the host refuses one whose code alone is larger.
            r["heap"] = gc.mem_alloc() + gc.mem_free()
            import deflate  # noqa: F401  (MicroPython 1.21+: compressed puts)

            if gc.mem_free() >= DEFLATE_FREE:
                r["deflate"] = WBITS
        except (ImportError, AttributeError):  # CPython: no GC heap of its own
            pass
        return r

    def entries(self):
        """The manifest's (path, size, sha256 hex), one line at a time."""
        with open(self.dir + "/" + MANIFEST) as f:
            f.readline()  # the header
            for _ in range(self.n):
                e = json.loads(f.readline())
                yield e[0], e[1], e[2]

    def file(self, i):
        """Entry i (1-based) of the checked manifest: (path, size, sha)."""
        if self.entry is None or self.entry[0] != i:
            g = self.entries()
            for _ in range(i):
                e = next(g)
            g.close()  # closes the manifest now, not at the next collection
            self.entry = (i,) + e
        return self.entry[1:]

    def _manifest(self, mp):
        """Check the complete manifest file (JSON lines: a header, then one
        [path, size, sha256] a file); self.n from it."""
        if sha256_file(mp) != self.want["hash"]:
            os.remove(mp)
            raise Refused(
                "manifest: SHA-256 mismatch with begin's hash (tampered or damaged in "
                "transit): refused, it is sent again"
            )
        with open(mp) as f:
            try:
                m = json.loads(f.readline())
            except ValueError:
                m = None
            if type(m) is not dict:
                raise Refused("manifest: its first line is not a JSON object")
            b = m.get("board")
            if b != self.board:
                raise Refused("bundle built for board %s; this device is a %s" % (b, self.board))
            mpy = m.get("mpy")
            im = getattr(sys.implementation, "_mpy", None)
            if mpy is not None and im is not None and (im & 0xFF) != mpy:
                raise Refused(
                    "bundle has .mpy version %s; this device loads version %d" % (mpy, im & 0xFF)
                )
            n = m.get("files")
            if type(n) is not int or not 0 < n <= MAX_FILES:
                raise Refused("manifest: files must count 1 to %d files" % MAX_FILES)
            total = have = 0
            for _ in range(n):
                try:
                    e = json.loads(f.readline())
                except ValueError:
                    e = None
                if type(e) is not list or len(e) != 3 or type(e[1]) is not int or e[1] < 0:
                    raise Refused("manifest: a file entry is not [path, size, sha256]")
                check_path(e[0])
                if type(e[2]) is not str or len(e[2]) != 64:
                    raise Refused("manifest: %s has no SHA-256" % e[0])
                total += e[1]
                have += min(size(self.dir + "/" + e[0]), e[1])
        _room(self.base, total - have)
        self.n = n

    def put(self, data):
        """One chunk: 6 bytes (file index, offset), then the bytes; or with
        ZBIT in the index, 8 (index, offset, the bytes it decodes to), then
        raw deflate (WBITS window) of them."""
        if self.want is None:
            raise Refused("no transfer begun (op begin first)")
        i, off, n, z = _head(data)
        sha = None
        if i == 0:
            path, sz = MANIFEST, self.want["size"]
        elif self.n is None:
            raise Refused("the manifest is not complete yet (file 0)")
        elif i > self.n:
            raise Refused("no file %d: the manifest lists %d" % (i, self.n))
        else:
            path, sz, sha = self.file(i)
        full = self.dir + "/" + path
        have = size(full)
        if off != have:
            raise Refused("out of order: file %d has %d bytes" % (i, have))
        if have + n > sz:
            raise Refused("file %d: %d bytes past its size %d" % (i, have + n - sz, sz))
        if have == 0 and "/" in path:
            makedirs(full.rpartition("/")[0])
        with open(full, "ab") as f:
            got = _inflate(memoryview(data)[8:], f, n) if z else f.write(memoryview(data)[6:])
        if got == -2:  # nothing was written: the heap had no room for the decoder
            raise Refused("file %s: no heap to decode a compressed chunk: send it plain" % path)
        if z and got != n:
            os.remove(full)
            raise Refused(
                "file %s: a compressed chunk did not decode to its %d bytes (damaged in "
                "transit): refused, it is sent again" % (path, n)
            )
        have += n
        if have == sz:
            if i == 0:
                self._manifest(full)
            elif sha256_file(full) != sha:
                os.remove(full)
                raise Refused(
                    "file %s: SHA-256 mismatch with the manifest (tampered or damaged "
                    "in transit): refused, it is sent again" % path
                )
        return {"next": have}

    def copy(self, p):
        """{"op": "copy", "from": i}: the manifest's files from i on that the
        slot has no byte of, each copied from a file the device holds with
        the manifest's size and SHA-256 (its running bundle's, else factory
        modules installed as files; frozen ones are not) and checked again
        on flash, until COPY_BYTES were read. {"copied": [index, ...],
        "next": the index to go on from, or None: every file was tried}."""
        if self.want is None or self.n is None:
            raise Refused("the manifest is not complete yet (file 0)")
        j = p.get("from")
        if type(j) is not int or not 0 < j <= self.n:
            raise Refused("copy takes {from: a file index, 1 to %d}" % self.n)
        done = []
        spent = 0
        g = self.entries()
        try:
            for i in range(1, self.n + 1):
                path, sz, sha = next(g)
                if i < j:
                    continue
                if spent >= COPY_BYTES:
                    return {"copied": done, "next": i}
                full = self.dir + "/" + path
                if sz and not size(full):
                    spent += sz
                    if _copy(self.dir, path, sz, sha):
                        done.append(i)
        finally:
            g.close()
        return {"copied": done, "next": None}

    def verify(self, h):
        """Every file complete and matching the manifest, before the switch."""
        if self.want is None or self.n is None:
            raise Refused("nothing staged (op begin and the files first)")
        if h != self.want["hash"]:
            raise Refused("switch names bundle %s but %s is staged" % (h, self.want["hash"]))
        for path, sz, sha in self.entries():
            full = self.dir + "/" + path
            if size(full) != sz:
                raise Refused("file %s incomplete: %d of %d bytes" % (path, size(full), sz))
            if sha256_file(full) != sha:
                os.remove(full)
                raise Refused("file %s: SHA-256 mismatch on flash: it is sent again" % path)

    def staged(self):
        if self.want is None:
            return None
        total = got = None
        if self.n is not None:
            total = got = 0
            for path, sz, _h in self.entries():
                total += sz
                got += min(size(self.dir + "/" + path), sz)
        return {
            "version": self.want["version"],
            "hash": self.want["hash"],
            "slot": self.slot,
            "bytes": got,
            "total": total,
        }

    def done(self):
        """The switch is decided: the stage record goes."""
        try:
            os.remove(self.stage_path())
        except OSError:
            pass


def _head(data):
    """A put's (file index, offset, the file's bytes it brings, compressed?)."""
    if type(data) is not bytes or len(data) < 6:
        raise Refused("put takes bytes: >HI file index and offset, then the data")
    i, off = struct.unpack(">HI", data[:6])
    if not i & ZBIT:
        return i, off, len(data) - 6, False
    if len(data) < 8:
        raise Refused("a compressed put takes >HIH index, offset and length first")
    return i ^ ZBIT, off, struct.unpack(">H", data[6:8])[0], True


def _inflate(src, f, n):
    """Decode the raw deflate src into file f, a small buffer at a time:
    the bytes it decoded to (past n it stops: more than n), -1 if it does
    not decode, -2 if the decoder found no heap (before any write: its
    window and tables are allocated by the first read)."""
    import io

    import deflate

    got = 0
    try:
        d = deflate.DeflateIO(io.BytesIO(src), deflate.RAW, WBITS)
        buf = bytearray(256)
        mv = memoryview(buf)
        k = d.readinto(buf)
    except MemoryError:
        return -2
    except (OSError, EOFError, ValueError):
        return -1
    try:
        while k and got <= n:
            got += k
            if got <= n:
                f.write(mv[:k])
            k = d.readinto(buf)
    except (OSError, EOFError, ValueError):
        return -1
    return got


def _source(path, sz, sha, skip):
    """A file the device holds that is the bundle's path: on sys.path (the
    running slot first, then the filesystem's modules), not the frozen ones
    nor the slot being written, with size sz and SHA-256 sha; else None."""
    for d in sys.path:
        if d.startswith(".frozen") or d == skip:
            continue
        src = d + "/" + path if d and d[-1] != "/" else d + path
        try:
            if os.stat(src)[6] != sz:
                continue
        except OSError:
            continue
        if sha256_file(src) == sha:
            return src
    return None


def _copy(into, path, sz, sha):
    """path copied from its _source into dir into; checked by its SHA-256
    on flash (a mismatch deletes it: the file is sent). Whether it was."""
    src = _source(path, sz, sha, into)
    if src is None:
        return False
    full = into + "/" + path
    if "/" in path:
        makedirs(full.rpartition("/")[0])
    with open(full, "wb") as f:
        for b in blocks(src):
            f.write(b)
    if sha256_file(full) == sha:
        return True
    os.remove(full)
    return False


def _free(base):
    """Bytes free on the filesystem that holds the slots; None: cannot tell."""
    try:
        s = os.statvfs(base)
    except (OSError, AttributeError):
        return None
    return s[0] * s[4]


def _room(base, need):
    free = _free(base)
    if free is None:
        return  # cannot tell: the writes fail with ENOSPC if it does not fit
    if need > free:
        raise Refused("the bundle needs %d more bytes; the filesystem has %d free" % (need, free))
