"""Durable writes on the host: a file whole or not at all, a rename that
survives a crash, a directory's entries made durable. The host side's one
helper for them (the log, the bridge's state and keystore, ingest's sink, the
tools' configs and build outputs); here, at the bottom of the host stack,
because everything that writes so imports tlog already and tlog imports
nothing of ours. The device keeps its own (firmware.write_atomic:
MicroPython cannot fsync a directory)."""

from __future__ import annotations

import os
from typing import IO, Any, Callable


def fsync_dir(path: str) -> None:
    """Make the directory's entries (creations, renames, unlinks) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(
    final: str,
    tmp: str,
    write: Callable[[IO[Any]], Any],
    durable: bool = True,
    mtime: float | None = None,
    mode: int = 0o666,
) -> None:
    """Create the file final whole or not at all: write(f) fills tmp, which is
    then renamed to final; on any error tmp is removed. tmp is made new with
    the permission bits mode (under the umask), never through what is at its
    name already: a leftover is removed, and a symlink planted there in the
    meantime makes the write fail instead of following it (O_EXCL).
    durable: fsync the file before the rename and its directory after;
    mtime: set on the file (before the fsync)."""
    if os.path.lexists(tmp):  # a leftover (a crash mid-write) or a planted link
        os.unlink(tmp)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            if mtime is not None:
                os.utime(f.fileno(), (mtime, mtime))
            if durable:
                os.fsync(f.fileno())
        os.rename(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(os.path.dirname(final))


def rename_durably(tmp: str, final: str) -> None:
    """Rename tmp, a file or a directory tree written and closed, to final so
    that after a crash final is either absent or whole: every file and
    directory under tmp is fsynced first, final's directory after."""
    if os.path.isdir(tmp):
        for d, _, files in os.walk(tmp):
            for name in files:
                fd = os.open(os.path.join(d, name), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            fsync_dir(d)
    else:
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    os.replace(tmp, final)
    fsync_dir(os.path.dirname(os.path.abspath(final)))
