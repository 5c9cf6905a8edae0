"""Segment file names and making directory entries durable: what every
module that creates, renames or lists segment files shares."""
import os


def segment_name(segment_id, sealed=True):
    """The file name of a row-format segment: sealed (version 1), or the
    active one (``.open``)."""
    return "%020d.seg%s" % (segment_id, "" if sealed else ".open")


def parquet_name(segment_id):
    """The file name of a version-2 (Parquet) sealed segment."""
    return "%020d.parquet" % segment_id


def fsync_dir(path):
    """Make the directory's entries (creations, renames, unlinks) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
