"""The bytes on disk: file and record headers, framing (docs/telemetry-log.md
sections 2 and 3)."""

from __future__ import annotations

import struct
import zlib

FORMAT_VERSION = 1

# File header: magic, format version, flags (0), segment id, CRC-32 of bytes 0..15.
FILE_MAGIC = b"\xffEBL"
FILE_HEADER = struct.Struct(">4sHHQI")
FILE_HEADER_SIZE = FILE_HEADER.size  # 20

# Record header: magic, format version, body length, CRC-32 over header bytes
# 0..9 (magic, version, length) followed by the body.  0xFF never occurs in
# UTF-8, so a record magic can never appear inside a valid body.
RECORD_MAGIC = b"\xffEBR"
RECORD_HEADER = struct.Struct(">4sHII")
RECORD_HEADER_SIZE = RECORD_HEADER.size  # 14
MAX_BODY_BYTES = 16 * 1024 * 1024


def file_header(segment_id: int) -> bytes:
    """The FILE_HEADER_SIZE bytes a segment file starts with."""
    head = FILE_HEADER.pack(FILE_MAGIC, FORMAT_VERSION, 0, segment_id, 0)[:16]
    return head + struct.pack(">I", zlib.crc32(head))


def frame(body: bytes) -> bytes:
    """A record: its header (with the CRC over header and body), then body."""
    head = struct.pack(">4sHI", RECORD_MAGIC, FORMAT_VERSION, len(body))
    return head + struct.pack(">I", zlib.crc32(body, zlib.crc32(head))) + body


def check_file_header(data: bytes, segment_id: int) -> tuple[str, bool] | None:
    """None if data is a valid header for segment_id, else (reason, fatal).
    fatal means the whole file must be skipped."""
    if len(data) < FILE_HEADER_SIZE:
        return "truncated file header", False
    magic, version, _flags, sid, crc = FILE_HEADER.unpack(data)
    if magic != FILE_MAGIC or zlib.crc32(data[:16]) != crc:
        return "bad file header", False
    if version != FORMAT_VERSION:
        return "unsupported format version %d" % version, True
    if sid != segment_id:
        return "file header names segment %d, not %d" % (sid, segment_id), True
    return None
