"""Every `edgebus` command the docs show in a code block is one the command
line takes: its subcommand exists and its options parse (argparse, as
`edgebus` runs them, without running the command). What the commands do is
run by the tests of each (the README's two by test_install and the demo's)."""

import argparse
import contextlib
import glob
import importlib
import io
import os
import re
import shlex

import pytest

from edgebus.tools import cli
from tests.conftest import ROOT

DOCS = ["README.md", "CONTRIBUTING.md", "edgebus/device/firmware/README.md"] + sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))
)
FENCE = re.compile(r"^\s*```")
# ("edgebus report: fleet" is a report's first line, shown as output)
COMMAND = re.compile(r"^\s*(\$ )?edgebus [a-z][a-z-]*(\s|$)")
# A synopsis ("--log DIR [DIR|GLOB ...] [--master URL]") is no command to run.
SYNOPSIS = re.compile(r"\[-|\.\.\.\]")
# An option whose value names a file of the reader's (views.toml): argparse
# reads it while parsing, which says nothing of the docs.
READER_FILE = re.compile(r"cannot read \S+: No such file or directory")


def commands(path):
    """(line, command) for each `edgebus ...` line in the file's code blocks,
    with its continuation lines joined and a leading "$ " dropped."""
    out, inside, held = [], False, None
    with open(os.path.join(ROOT, path)) as f:
        for n, line in enumerate(f, 1):
            if FENCE.match(line):
                inside, held = not inside, None
                continue
            if not inside:
                continue
            s = line.rstrip("\n")
            if held is not None:
                s, held = held[1] + " " + s.strip(), held
            if s.rstrip().endswith("\\"):
                held = (held[0] if held else n, s.rstrip()[:-1])
                continue
            start = held[0] if held else n
            held = None
            if COMMAND.match(s) and not SYNOPSIS.search(s):
                out.append((start, re.sub(r"^\s*\$ ", "", s).strip()))
    return out


CASES = [(p, n, s) for p in DOCS for n, s in commands(p)]


def argv_of(s):
    """The command's argv: comments, pipes and redirections cut off."""
    argv = shlex.split(s, comments=True)
    for i, a in enumerate(argv):
        if a in ("|", "||", "&&", ";", "&", ">", ">>", "2>&1") or a.startswith(">"):
            return argv[:i]
    return argv


def test_the_docs_show_commands():
    # the extraction itself: the pages that teach the shell have their commands found
    pages = {p for p, _n, _s in CASES}
    assert {"docs/shell.md", "docs/spark.md", "docs/devices.md", "docs/bridge.md"} <= pages, pages
    assert len(CASES) >= 30


@pytest.mark.parametrize(("path", "line", "command"), CASES, ids=lambda v: str(v)[:40])
def test_a_documented_command_parses(path, line, command):
    argv = argv_of(command)
    where = "%s:%d: %s" % (path, line, command)
    if argv[1] in ("-h", "--help"):
        return
    assert argv[1] in cli.COMMANDS, "%s: no command %r" % (where, argv[1])
    ap = argparse.ArgumentParser(prog="edgebus " + argv[1])
    importlib.import_module(cli.COMMANDS[argv[1]][0]).add_arguments(ap)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            ap.parse_args(argv[2:])
    except SystemExit as e:
        said = err.getvalue().strip()
        assert not e.code or READER_FILE.search(said), "%s\n%s" % (where, said)
