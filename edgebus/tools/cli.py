"""The `edgebus` command (host side).

Each subcommand lives in its own module and is imported only when used, so a
missing optional dependency (pyspark, esptool, ...) affects only the commands
that need it, with a clear message.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

from edgebus.tools.boardkit import executables

# name -> (module, help, the extra its dependencies come with). The module
# provides add_arguments(parser) and run(args) -> int.
COMMANDS = {
    "build": (
        "edgebus.tools.boardkit.build",
        "compile edgebus + firmware to a .mpy bundle for a board",
        "micropython",
    ),
    "firmware": (
        "edgebus.tools.boardkit.firmware",
        "build a MicroPython firmware image with edgebus frozen in",
        "micropython",
    ),
    "deploy": (
        "edgebus.tools.commands.deploy",
        "copy a built bundle and config to a board with mpremote",
        "boards",
    ),
    "flash": (
        "edgebus.tools.commands.flash",
        "write a MicroPython firmware image to a board",
        "boards",
    ),
    "fleet": (
        "edgebus.tools.commands.fleet",
        "run N simulated devices (the real firmware on the MicroPython unix port)",
        "micropython",
    ),
    "pub": (
        "edgebus.tools.commands.pub",
        "publish (or --retain) a value on the bridge's host bus",
        "bridge",
    ),
    "sub": (
        "edgebus.tools.commands.sub",
        "print the host bus's messages matching a pattern, a line each",
        "bridge",
    ),
    "watch": (
        "edgebus.tools.commands.watch",
        "print the retained values matching a pattern, then changes",
        "bridge",
    ),
    "call": (
        "edgebus.tools.commands.call",
        "call an endpoint on the host bus and print its reply",
        "bridge",
    ),
    "whoami": (
        "edgebus.tools.commands.whoami",
        "the principal the bridge sees for you (uid, gid, pid)",
        "bridge",
    ),
    "keys": (
        "edgebus.tools.commands.keys",
        "device keys: rotate NODE over its session, new NODE, list",
        "bridge",
    ),
    "provision": (
        "edgebus.tools.commands.provision",
        "new devices: a key each in the bridge's keystore and a config for deploy",
        "bridge",
    ),
    "devices": (
        "edgebus.tools.commands.devices",
        "a running bridge's MQTT devices: reload, move NODE between bridges",
        "bridge",
    ),
    "ota": (
        "edgebus.tools.commands.ota",
        "update devices over the bus: push a bundle in waves, status, rollback",
        "bridge",
    ),
    "status": (
        "edgebus.tools.commands.status",
        "a snapshot of a running bridge: links, peers, counters",
        "bridge",
    ),
    "ingest": (
        "edgebus.ingest.job",
        "stream the telemetry log into a Parquet table with Spark",
        "spark",
    ),
    "report": (
        "edgebus.ingest.report.command",
        "per-device counts, gaps and rates from the ingested table",
        "spark",
    ),
    "views": (
        "edgebus.ingest.views.infer",
        "typed views: infer a [[view]] block for a topic pattern from the ingested table",
        "spark",
    ),
    "schema": (
        "edgebus.tools.commands.schema",
        "the JSON Schema of the bridge's TOML, a board manifest or a views file, for editors",
        "bridge",
    ),
}


def _load(name: str) -> Any:
    mod, _, extra = COMMANDS[name]
    try:
        return importlib.import_module(mod)
    except ImportError as e:
        sys.exit(
            "edgebus %s: cannot load %s (%s); install the project with its extras: "
            "pip install 'edgebus[%s]'" % (name, mod, e, extra)
        )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="edgebus", description="edgebus host tools")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_, _) in COMMANDS.items():
        sub.add_parser(name, help=help_, add_help=False)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        ap.print_help() if not argv or argv[0] in ("-h", "--help") else ap.error(
            "unknown command %r (choose from %s)" % (argv[0], ", ".join(COMMANDS))
        )
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    name = argv[0]
    mod = _load(name)
    p = argparse.ArgumentParser(prog="edgebus " + name, description=COMMANDS[name][1])
    mod.add_arguments(p)
    args = p.parse_args(argv[1:])
    try:
        return mod.run(args) or 0
    except executables.ToolNotFound as e:  # any command: one line naming the extra
        print("edgebus %s: %s" % (name, e), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
