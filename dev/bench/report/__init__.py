"""Render benchmark results as BENCHMARKS.md (and its plots when matplotlib is there).

The words are in dev/bench/templates/ (Markdown with ``$name`` fields,
string.Template); this package computes the figures that fill them and the rows
of the tables: a module per section, formats.py and templates.py for what they
share, document.py for the whole."""

from .document import markdown

__all__ = ["markdown"]
