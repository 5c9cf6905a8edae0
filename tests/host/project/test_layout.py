"""The layout holds: one path per file (the code where Python imports it, the
top-level parts links to it), no import circle (type-checking imports
included), no arrow up or sideways between the stack's parts, no private
reach across packages, no one-letter module alias but pyspark's ``F``,
nothing installed imports dev/, the host packages are imported under edgebus
only and all installed, and no module in the product's big parts grows past
500 lines nor a function past 60 (ARCHITECTURE.md)."""

import ast
import os
import tomllib
from pathlib import Path

import pytest

from edgebus.tools.boardkit import devicefiles
from tests.conftest import ROOT

# The host packages, edgebus/<name>, each with a top-level link of that name.
HOST = ("bridge", "client", "tlog", "ingest", "tools")
# The device's packages (edgebus/device/<name>, imported by a device as <name>).
DEVICE = ("firmware", "boards")
# real folder -> the name its modules are imported by
PACKAGES = {
    "edgebus": "edgebus",
    "edgebus/device/firmware": "firmware",
    "edgebus/device/boards": "boards",
    "dev": "dev",
}
SIZE_CAPPED = ("edgebus", "bridge", "tlog", "ingest", "tools", "client", "firmware")
# Lines as ruff format lays them out (a call that does not fit takes a line per
# argument): about a tenth more than the hand layout a 450-line cap was set for.
MAX_LINES = 500


def _part(mod):
    """The top-level part a module belongs to: a host package's name, or its root's."""
    p = mod.split(".")
    return p[1] if p[0] == "edgebus" and len(p) > 1 and p[1] in HOST else p[0]


def _modules():
    """{dotted module name: (path, is_package)} for every module under the real
    folders of PACKAGES (edgebus/device/ only as the device's own), and
    {module name: its part}. No walk follows a link."""
    out, folder = {}, {}
    device = os.path.join(ROOT, "edgebus", "device")
    for top, name in PACKAGES.items():
        base = os.path.join(ROOT, *top.split("/"))
        for d, dirs, files in os.walk(base):
            dirs[:] = [x for x in dirs if os.path.join(d, x) != device]
            for f in files:
                if f.endswith(".py"):
                    rel = os.path.relpath(os.path.join(d, f), base)[:-3].split(os.sep)
                    pkg = rel[-1] == "__init__"
                    mod = ".".join([name] + (rel[:-1] if pkg else rel))
                    out[mod] = (os.path.join(d, f), pkg)
                    folder[mod] = _part(mod)
    return out, folder


MODULES, FOLDER = _modules()


def _package(name):
    """The package a module belongs to: itself for an __init__, else its parent."""
    return name if MODULES[name][1] else name.rpartition(".")[0]


def _imports(name):
    """(imported module, names taken from it, alias -> module) for one module,
    imports under `if TYPE_CHECKING:` included: a circle mypy follows is one a
    reader follows too."""
    path, is_pkg = MODULES[name]
    tree = ast.parse(Path(path).read_text(), path)
    found, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in PACKAGES:
                    found.append((a.name, ()))
                    aliases[a.asname or a.name.split(".")[0]] = a.name
                elif a.asname and len(a.asname) == 1:
                    aliases[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                sub = mod + "." + a.name
                if sub in MODULES:
                    found.append((sub, ()))
                    aliases[a.asname or a.name] = sub
                else:
                    found.append((mod, (a.name,)))
                    if a.asname and len(a.asname) == 1:
                        aliases[a.asname] = sub
    return tree, found, aliases


def test_no_import_circle():
    graph = {m: sorted({i for i, _ in _imports(m)[1] if i in MODULES} - {m}) for m in MODULES}
    state, stack, circles = {}, [], []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for d in graph[m]:
            if state.get(d) == "open":
                circles.append(stack[stack.index(d) :] + [d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert circles == []


# The stack, bottom up: a part imports only parts on a lower layer (no arrow
# up, and none sideways: the bridge and ingest meet only in the log format).
LAYERS = {
    "core": 0,  # edgebus/*.py, portable
    "link": 1,  # edgebus/link, portable
    "tlog": 2,
    "client": 2,
    "firmware": 2,  # the device runtime, portable
    "boards": 2,
    "bridge": 3,
    "ingest": 3,
    "tools": 4,
    "dev": 5,  # not installed
}


def _layer_part(mod):
    p = mod.split(".")
    if p[0] != "edgebus":
        return p[0]
    return "link" if p[1:2] == ["link"] else FOLDER[mod] if FOLDER[mod] != "edgebus" else "core"


def test_no_arrow_up_or_sideways_between_parts():
    bad = sorted(
        "%s -> %s" % (m, i)
        for m in MODULES
        for i, _ in _imports(m)[1]
        if i in MODULES
        and _layer_part(i) != _layer_part(m)
        and LAYERS[_layer_part(i)] >= LAYERS[_layer_part(m)]
    )
    assert bad == []


def test_no_private_name_of_another_package():
    reaches = []
    for m in MODULES:
        tree, found, aliases = _imports(m)
        for mod, names in found:
            for n in names:
                if (
                    n.startswith("_")
                    and not n.startswith("__")
                    and mod in MODULES
                    and _package(mod) != _package(m)
                ):
                    reaches.append("%s: from %s import %s" % (m, mod, n))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                target = aliases.get(node.value.id)
                if (
                    target in MODULES
                    and node.attr.startswith("_")
                    and not node.attr.startswith("__")
                    and _package(target) != _package(m)
                ):
                    reaches.append("%s: %s.%s" % (m, target, node.attr))
    assert reaches == []


def test_one_letter_aliases_mean_one_thing():
    seen = {}
    for m in MODULES:
        for alias, target in _imports(m)[2].items():
            if len(alias) == 1:
                seen.setdefault(alias, set()).add(target)
    assert seen in ({}, {"F": {"pyspark.sql.functions"}})


def test_nothing_installed_imports_dev():
    reach = [
        (m, i)
        for m in MODULES
        if FOLDER[m] != "dev"
        for i, _ in _imports(m)[1]
        if i.split(".")[0] == "dev"
    ]
    assert reach == []


def test_host_packages_are_imported_under_edgebus():
    """A host folder imported by its bare name fails where edgebus is installed,
    and from a checkout loads a second copy of its modules."""
    bare = []
    for top in list(PACKAGES) + ["tests"]:
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            for f in (f for f in files if f.endswith(".py")):
                path = os.path.join(d, f)
                for node in ast.walk(ast.parse(Path(path).read_text(), path)):
                    names = (
                        [a.name for a in node.names]
                        if isinstance(node, ast.Import)
                        else [node.module or ""]
                        if isinstance(node, ast.ImportFrom) and not node.level
                        else []
                    )
                    bare += [(path, n) for n in names if n.split(".")[0] in HOST]
    assert bare == []


def test_every_file_has_one_path_and_the_parts_keep_their_names():
    """The code lives where Python imports it (edgebus/, edgebus/device/): no
    link inside; each top-level part is a link to its real folder; pyproject
    installs every package there, and device bundles leave out exactly the
    host parts."""
    core = os.path.join(ROOT, "edgebus")
    inside = [
        os.path.join(d, x)
        for d, dirs, files in os.walk(core)
        for x in dirs + files
        if os.path.islink(os.path.join(d, x))
    ]
    assert inside == []
    tops = {h: "edgebus/" + h for h in HOST}
    tops.update({d: "edgebus/device/" + d for d in DEVICE})
    assert {t: os.readlink(os.path.join(ROOT, t)) for t in tops} == tops
    assert devicefiles.HOST_PARTS == HOST + ("device",)
    want = {"edgebus"}
    for d, dirs, files in os.walk(core):
        dirs[:] = [x for x in dirs if x.isidentifier()]  # not a board's C sources
        if d != core and any(f.endswith(".py") for f in files):
            want.add("edgebus." + os.path.relpath(d, core).replace(os.sep, "."))
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        got = tomllib.load(f)["tool"]["setuptools"]["packages"]
    assert sorted(got) == sorted(want | {"edgebus-stubs"})  # typings/edgebus, for type checkers


def test_modules_report_the_paths_git_tracks():
    """What Python imports from the checkout, by every name the code uses
    (edgebus.*, and firmware as the tests import it), is a file git tracks:
    tracebacks, coverage and blame name one file."""
    import subprocess
    import sys

    import edgebus.bridge.daemon
    import edgebus.tools.cli
    import firmware.config

    tracked = set(
        subprocess.run(
            ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    )
    mods = [edgebus.bridge.daemon, edgebus.tools.cli, firmware.config]
    mods += [m for n, m in sys.modules.items() if n.split(".")[0] in ("edgebus", "firmware")]
    untracked = sorted(
        {
            os.path.relpath(m.__file__, ROOT)
            for m in mods
            if getattr(m, "__file__", None) and os.path.abspath(m.__file__).startswith(ROOT)
        }
        - tracked
    )
    assert untracked == []


@pytest.mark.parametrize("top", SIZE_CAPPED)
def test_modules_stay_small(top):
    big = {
        m: n
        for m, (path, _) in MODULES.items()
        if FOLDER[m] == top
        for n in [sum(1 for _ in Path(path).read_text().splitlines(True))]
        if n > MAX_LINES
    }
    assert big == {}


MAX_FUNCTION_LINES = 60


@pytest.mark.parametrize("top", SIZE_CAPPED)
def test_functions_stay_small(top):
    """No function (or method) in the product over 60 lines, its docstring
    included: one that long does more than one thing."""
    big = {
        "%s.%s" % (m, n.name): n.end_lineno - n.lineno + 1
        for m, (path, _) in MODULES.items()
        if FOLDER[m] == top
        for n in ast.walk(ast.parse(Path(path).read_text(), path))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES
    }
    assert big == {}
