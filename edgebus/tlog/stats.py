"""What a read saw besides good records: the regions it skipped and the
segments it missed (docs/telemetry-log.md section 7).  Shared by the version-1
reader and the version-2 (Parquet) one."""

from __future__ import annotations


class ReadStats:
    """What a read saw besides good records.

    records: records yielded; corrupt: list of (file, offset, reason) naming
    the first byte of each skipped region; bytes_skipped: total bytes in those
    regions; missing: list of (first_id, last_id) inclusive ranges of
    segments asked for but not on disk (removed by retention or by hand)."""

    def __init__(self) -> None:
        self.records = 0
        self.corrupt: list[tuple[str, int, str]] = []
        self.bytes_skipped = 0
        self.missing: list[tuple[int, int]] = []

    @property
    def clean(self) -> bool:
        return not self.corrupt and not self.missing

    def _bad(self, file: str, offset: int, reason: str, nbytes: int) -> None:
        self.corrupt.append((file, offset, reason))
        self.bytes_skipped += max(0, nbytes)

    def __repr__(self) -> str:
        return "ReadStats(records=%d, corrupt=%d, bytes_skipped=%d, missing=%r)" % (
            self.records,
            len(self.corrupt),
            self.bytes_skipped,
            self.missing,
        )
