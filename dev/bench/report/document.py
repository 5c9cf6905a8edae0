"""BENCHMARKS.md as a whole: the header with each part's date and commit, then
the sections in order, each from its module."""

import re

from .bridge import bridge_section
from .core import core_cpython
from .fleetpage import fleetpage_section
from .link import link
from .log import log_section
from .mpy import core_mpy
from .ota import ota_section
from .spark import commands_section, spark_section
from .swarm import swarm_section
from .templates import fill
from .tls import tls_section

# ./do bench's parts (dev/bench/__main__.py PARTS) and the section each fills.
SECTIONS = (
    ("core", "1"),
    ("mpy", "2"),
    ("link", "3"),
    ("bridge", "4"),
    ("fleet", "4, a fleet"),
    ("device", "4, a device's cost"),
    ("spark", "5"),
    ("commands", "5, a small fleet's commands"),
    ("log", "6"),
    ("swarm", "8"),
    ("ota", "9"),
    ("tls", "10"),
    ("fleetpage", "11"),
)


def _header(res):
    m = res["meta"]
    parts = m.get("parts", {})
    rows = [
        "| %s | %s | %s | %s |" % (name, sec, parts[name]["date"], parts[name]["commit"])
        for name, sec in SECTIONS
        if name in parts
    ]
    return fill(
        "header", machine=m["machine"], cpus=m["cpus"], python=m["python"], parts="\n".join(rows)
    )


def markdown(res, out, md_dir=None):
    """BENCHMARKS.md for results res; plots go to out, linked relative to md_dir
    (the markdown's directory; default out). Section 7 is templates/board32.md as
    it is: `python -m dev.qemuheap` measures it (a firmware build per heap size,
    too slow for ./do bench)."""
    md_dir = md_dir or out
    blocks = [
        _header(res),
        fill("smoke") if res["meta"]["smoke"] else [],
        core_cpython(res, out, md_dir),
        core_mpy(res),
        link(res.get("link")),
        bridge_section(res, out, md_dir),
        spark_section(res.get("spark")),
        commands_section(res.get("commands")),
        log_section(res),
        fill("board32"),
        swarm_section(res.get("swarm")),
        ota_section(res.get("ota")),
        tls_section(res.get("tls")),
        fleetpage_section(res.get("fleetpage")),
    ]
    text = "\n\n".join("\n".join(b) for b in blocks if b)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n") + "\n"
