"""The bridge's durable telemetry log: segmented, append-only, checksummed.

The bridge appends chosen host-bus messages with :class:`LogWriter`; readers
(the PySpark data source, tools, tests) use :func:`list_segments`,
:func:`read_segment`, :func:`read_log` and :func:`latest_offset`.  The on-disk
format and every promise made to readers are specified in
``docs/telemetry-log.md``; this package is its reference implementation:

- ``edgebus.tlog.format``: file and record headers, framing;
- ``edgebus.tlog.records``: record bodies and their values;
- ``edgebus.tlog.segments``: the log directory's segment files;
- ``edgebus.tlog.reader``: reading sealed segments, resynchronising past bad bytes;
- ``edgebus.tlog.stats``: what a read skipped (:class:`ReadStats`);
- ``edgebus.tlog.columnar``: version-2 sealed segments, Parquet files (pyarrow);
- ``edgebus.tlog.writer``: the one writer, with ``edgebus.tlog.recovery`` and
  ``edgebus.tlog.retention``;
- ``edgebus.tlog.tail``: the newest sequence number per sender boot, for a restart.

Host only (CPython >= 3.11, POSIX: ``fcntl``, ``fsync`` of directories).
Standard library only, except ``edgebus.tlog.columnar`` (pyarrow), imported only when
a version-2 segment is sealed or read; nothing here ever unpickles or
evaluates data.
"""

from edgebus.tlog.durable import rename_durably, write_atomically
from edgebus.tlog.errors import LogError, LogLocked
from edgebus.tlog.format import (
    FILE_HEADER_SIZE,
    FILE_MAGIC,
    FORMAT_VERSION,
    MAX_BODY_BYTES,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    RECORD_MAGIC,
    check_file_header,
    file_header,
    frame,
)
from edgebus.tlog.reader import read_log, read_segment
from edgebus.tlog.records import (
    FIELDS,
    decode_body,
    decode_value,
    encode_body,
    encode_value,
    json_text,
    record_from_message,
    row_of,
    topic_text,
)
from edgebus.tlog.segments import (
    LOCK_NAME,
    earliest_offset,
    latest_offset,
    list_segments,
    parquet_name,
    sealed_files,
    segment_end,
    segment_file,
    segment_name,
    start_offset,
)
from edgebus.tlog.stats import ReadStats
from edgebus.tlog.tail import TAIL_BYTES, last_seqs
from edgebus.tlog.writer import LogWriter

__all__ = [
    "FORMAT_VERSION",
    "FILE_MAGIC",
    "FILE_HEADER_SIZE",
    "RECORD_MAGIC",
    "RECORD_HEADER",
    "RECORD_HEADER_SIZE",
    "MAX_BODY_BYTES",
    "LOCK_NAME",
    "FIELDS",
    "LogError",
    "LogLocked",
    "LogWriter",
    "ReadStats",
    "record_from_message",
    "encode_value",
    "decode_value",
    "topic_text",
    "encode_body",
    "decode_body",
    "file_header",
    "frame",
    "check_file_header",
    "segment_name",
    "parquet_name",
    "list_segments",
    "sealed_files",
    "segment_file",
    "segment_end",
    "start_offset",
    "json_text",
    "row_of",
    "read_segment",
    "read_log",
    "latest_offset",
    "earliest_offset",
    "last_seqs",
    "TAIL_BYTES",
    "write_atomically",
    "rename_durably",
]
