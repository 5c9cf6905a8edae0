"""The errors the log writer raises."""

from __future__ import annotations


class LogError(Exception):
    """The log directory is in a state the writer will not touch, or the
    writer failed an I/O operation earlier and must be reopened."""


class LogLocked(LogError):
    """Another writer holds the directory's lock."""
