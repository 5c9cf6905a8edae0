"""Segment file names: what every module that creates, renames or lists
segment files shares."""

from __future__ import annotations


def segment_name(segment_id: int, sealed: bool = True) -> str:
    """The file name of a row-format segment: sealed (version 1), or the
    active one (``.open``)."""
    return "%020d.seg%s" % (segment_id, "" if sealed else ".open")


def parquet_name(segment_id: int) -> str:
    """The file name of a version-2 (Parquet) sealed segment."""
    return "%020d.parquet" % segment_id
