"""A littlefs (v2) flash image with files in it, written on the host.

The image is what a board's filesystem holds (the emulated board's flash is
such a host file). MicroPython's own littlefs writes it: the unix port's
``vfs.VfsLfs2`` over a file, so the format is the board's exactly and no
other littlefs library is needed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from edgebus.tools.boardkit import mpybuild

# Runs under the unix micropython: image block-size blocks staging-dir.
SCRIPT = r"""
import os, sys, vfs
path, bs, n, stage = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

class Dev:
    def __init__(self, f):
        self.f = f
    def readblocks(self, b, buf, off=0):
        self.f.seek(b * bs + off)
        got = self.f.readinto(buf)
        for i in range(got or 0, len(buf)):
            buf[i] = 0xff
    def writeblocks(self, b, buf, off=0):
        self.f.seek(b * bs + off)
        self.f.write(buf)
    def ioctl(self, op, arg):
        return {4: n, 5: bs}.get(op, 0)

f = open(path, "r+b")
dev = Dev(f)
try:
    fs = vfs.VfsLfs2(dev)
except OSError:
    vfs.VfsLfs2.mkfs(dev)
    fs = vfs.VfsLfs2(dev)
with open(stage + "/names") as f:
    names = f.read().split("\n")
for i, name in enumerate(names):
    with open(stage + "/%d" % i, "rb") as src:
        data = src.read()
    parts = name.split("/")
    for k in range(1, len(parts)):       # the folders on the way
        try:
            fs.mkdir("/".join(parts[:k]))
        except OSError:
            pass
    with fs.open(name, "wb") as dst:
        dst.write(data)
f.close()
"""


def write(image: str, files: dict[str, bytes], size: int, block: int = 4096) -> None:
    """Put files ({path: bytes}, "a/b.py" makes folder a) into the littlefs image (created
    blank, size bytes, when absent); a file already there is replaced and the
    rest of the filesystem (boot counter, spool) is kept."""
    if not os.path.exists(image):
        with open(image, "wb") as f:
            f.truncate(size)  # zeros: not littlefs, so the script formats it
    stage = tempfile.mkdtemp(prefix="lfs-")
    fd, script = tempfile.mkstemp(suffix=".py")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(SCRIPT)
        names = list(files)
        for i, name in enumerate(names):
            with open(os.path.join(stage, str(i)), "wb") as f:
                f.write(files[name])
        with open(os.path.join(stage, "names"), "w") as f:
            f.write("\n".join(names))
        n = os.path.getsize(image) // block
        r = subprocess.run(
            [mpybuild.micropython(), script, os.path.abspath(image), str(block), str(n), stage],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if r.returncode != 0:
            raise RuntimeError("writing %s failed: %s" % (image, (r.stderr or r.stdout).strip()))
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        os.remove(script)
