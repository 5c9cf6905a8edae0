"""The Link's state has one owner per field (ARCHITECTURE.md): ``Link.__init__``
sets the fields in one block per owner, headed ``# -- NAME.py:`` (``# -- any
module:`` for the latest error, which every concern reports), and calls each
owner's ``init(link)``, whose fields are that owner's. Outside link.py only a
field's owner assigns ``link.<field>``; a field set in an owner's
``reset(link)`` belongs to that owner, and every reset runs in both ``__init__``
(directly or through its owner's init) and ``end_session``, so end_session
repeats no initial value itself. The hooks (``Link.HOOKS``) are the link's
owner's: assigned outside the link package only."""

import ast
import os
import re
from pathlib import Path

from tests.conftest import ROOT

EDGEBUS = os.path.join(ROOT, "edgebus")
LINK = "link/link.py"
HEADER = re.compile(r"\s*# -- (\S+?)(\.py| module):")


def _sources():
    """{path under edgebus/: source} of every module of edgebus/."""
    out = {}
    for d, _, files in os.walk(EDGEBUS):
        for f in files:
            if f.endswith(".py"):
                p = os.path.join(d, f)
                out[os.path.relpath(p, EDGEBUS).replace(os.sep, "/")] = Path(p).read_text()
    return out


def _targets(node):
    """The expressions an assignment statement binds (tuples unpacked)."""
    if isinstance(node, ast.Assign):
        todo = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        todo = [node.target]
    else:
        return
    while todo:
        t = todo.pop()
        if isinstance(t, (ast.Tuple, ast.List)):
            todo.extend(t.elts)
        elif isinstance(t, ast.Starred):
            todo.append(t.value)
        else:
            yield t, node


def _writes(tree, name):
    """(field, line, assignment) for each ``name.field = ...`` under ``tree``."""
    for node in ast.walk(tree):
        for t, a in _targets(node):
            if (
                isinstance(t, ast.Attribute)
                and isinstance(t.value, ast.Name)
                and t.value.id == name
            ):
                yield t.attr, t.lineno, a


def _def(body, name):
    for n in body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name:
            return n
    return None


def _calls(fn, name="reset"):
    """The modules whose ``name``(self) ``fn`` calls: ["tx", ...], also as
    ``for m in (tx, rx): m.name(self)``."""
    loops = {
        n.target.id: [e.id for e in n.iter.elts if isinstance(e, ast.Name)]
        for n in ast.walk(fn)
        if isinstance(n, ast.For)
        and isinstance(n.target, ast.Name)
        and isinstance(n.iter, (ast.Tuple, ast.List))
    }
    out = []
    for n in ast.walk(fn):
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == name
            and isinstance(n.func.value, ast.Name)
        ):
            out.extend(loops.get(n.func.value.id, [n.func.value.id]))
    return out


def _calls_own_reset(fn):
    """Does an owner's init() call its module's reset()?"""
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "reset"
        for n in ast.walk(fn)
    )


def _own(owner, field, who, where, out):
    """Record ``who`` as field's owner; a problem when another owns it already."""
    if owner.setdefault(field, who) != who:
        out.append("%s: %s owned by %s and %s" % (where, field, owner[field], who))


def _init_owners(source, init, pkg, owner, out):
    """Each field __init__ sets, owned by the block it is set in: a header
    owns the lines down to the next one."""
    heads = []
    for i, line in enumerate(source.split("\n"), 1):
        m = HEADER.match(line)
        if m and init.lineno <= i <= init.end_lineno:
            heads.append((i, "any" if m.group(2) == " module" else pkg + m.group(1) + ".py"))
    for field, line, _ in _writes(init, "self"):
        who = [h[1] for h in heads if h[0] < line]
        _own(owner, field, who[-1] if who else None, "%s:%d" % (LINK, line), out)


def _owner_fns(trees, pkg, owner, out, name, started):
    """{path: its ``name``(link)} of the link package ("init" or "reset"); each
    owns the fields it sets, which ``started`` ({field: where}: __init__, an
    init) must not set too."""
    fns = {}
    for p, tree in trees.items():
        r = _def(tree.body, name) if p.startswith(pkg) else None
        if r is not None:
            fns[p] = r
            for field, line, _ in _writes(r, r.args.args[0].arg):
                if field in started:
                    out.append(
                        "%s:%d: %s is set in %s and %s()" % (p, line, field, started[field], name)
                    )
                _own(owner, field, p, "%s:%d" % (p, line), out)
    return fns


def _check_end_session(init, end, pkg, owner, first, fns, out):
    """Each init runs at the start, each reset at the start (or in its
    owner's init) and at a session's end; end_session sets no initial value
    again, nor a field a reset() sets."""
    inits, resets = fns
    at_start = {pkg + m + ".py" for m in _calls(init, "init")}
    for p in sorted(set(inits) - at_start):
        out.append("%s: __init__ does not call %s init()" % (LINK, p))
    for fn in (init, end):
        called = {pkg + m + ".py" for m in _calls(fn)}
        if fn is init:
            called |= {p for p in at_start & set(inits) if _calls_own_reset(inits[p])}
        for p in sorted(set(resets) - called):
            out.append("%s: %s does not call %s reset()" % (LINK, fn.name, p))
    start = {
        f: ast.dump(a.value)
        for fn, me in [(init, "self")] + [(i, i.args.args[0].arg) for i in inits.values()]
        for f, _, a in _writes(fn, me)
        if isinstance(a, ast.Assign)
    }
    for field, line, a in _writes(end, "self"):
        if owner.get(field) in resets and field not in first:
            out.append(
                "%s:%d: end_session sets %s, which %s reset() sets"
                % (LINK, line, field, owner[field])
            )
        elif isinstance(a, ast.Assign) and start.get(field) == ast.dump(a.value):
            out.append(
                "%s:%d: end_session sets %s as __init__ does: its owner's reset()"
                % (LINK, line, field)
            )


def _hooks(cls):
    """The names in the class's ``HOOKS = (...)``."""
    for n in cls.body:
        if isinstance(n, ast.Assign) and [getattr(t, "id", None) for t in n.targets] == ["HOOKS"]:
            return set(ast.literal_eval(n.value))
    return set()


def _check_writers(cls, trees, pkg, owner, out):
    """Who writes what: link.py only the fields __init__ sets, another module its own;
    a hook only the link's owner, outside the link package."""
    hooks = _hooks(cls)
    for field, line, _ in _writes(cls, "self"):
        if field not in owner:
            out.append("%s:%d: self.%s is not set in __init__" % (LINK, line, field))
    for p, tree in sorted(trees.items()):
        if p == LINK:
            continue
        for field, line, _ in _writes(tree, "link"):
            who = owner.get(field)
            if field in hooks:
                if p.startswith(pkg):
                    out.append("%s:%d: link.%s is the owner's hook" % (p, line, field))
                continue
            if who is None:
                out.append(
                    "%s:%d: link.%s is no Link field (set it in __init__)" % (p, line, field)
                )
            elif who not in (p, "any"):
                out.append("%s:%d: link.%s belongs to %s" % (p, line, field, who))


def check(sources):
    """({field: owner}, problems) of ``sources`` ({path under edgebus/: source},
    LINK among them); an owner is a path, or "any"."""
    out = []
    owner = {}
    pkg = LINK.rpartition("/")[0] + "/"
    trees = {p: ast.parse(s) for p, s in sources.items()}
    cls = [n for n in trees[LINK].body if isinstance(n, ast.ClassDef) and n.name == "Link"][0]
    init, end = _def(cls.body, "__init__"), _def(cls.body, "end_session")
    _init_owners(sources[LINK], init, pkg, owner, out)
    started = dict.fromkeys(owner, "__init__")
    inits = _owner_fns(trees, pkg, owner, out, "init", started)
    started.update((f, p + " init()") for f, p in owner.items() if f not in started)
    first = set(owner)
    resets = _owner_fns(trees, pkg, owner, out, "reset", started)
    for f in sorted(f for f, who in owner.items() if who is None):
        out.append("%s: %s is in no owner's block" % (LINK, f))
    _check_end_session(init, end, pkg, owner, first, (inits, resets), out)
    _check_writers(cls, trees, pkg, owner, out)
    return owner, out


def test_each_link_field_is_written_by_its_owner():
    owner, found = check(_sources())
    assert found == []
    assert (owner["_s_tx"], owner["_hs"], owner["tx_seq"], owner["last_error"]) == (
        "link/seal.py",
        "link/handshake.py",
        "link/tx.py",
        "any",
    )
    assert (owner["_stuck"], owner["_pending"]) == ("link/rx.py", "link/calls.py")  # by reset()


def test_a_write_by_another_module_is_caught_in_the_tree():
    src = _sources()
    src["link/tx.py"] += "\n\ndef planted(link):\n    link._hs = []\n"
    assert [p for p in check(src)[1] if p.startswith("link/tx.py:")] == [
        "link/tx.py:%d: link._hs belongs to link/handshake.py" % (src["link/tx.py"].count("\n"))
    ]


LINK_SRC = """
class Link:
    def __init__(self):
        # -- link.py: configuration --
        self.node = 1
        self.status = "down"
        # -- any module: the latest error --
        self.last_error = None
        # -- tx.py: sending --
        self._q = []
        tx.reset(self)
        # -- rx.py: receiving --
        self._n = 0
        rx.reset(self)

    def end_session(self, why):
        self.status = "down"
        self._late = 1
        self._snap = None
        tx.reset(self)
"""
TX_SRC = "def reset(link):\n    link._snap = None\n    link._q = []\n"
RX_SRC = """def reset(link):
    link._stuck = False

def on(link):
    link._n, link._q = 1, []
    link._snap += 1
    link.last_error = "bad"
    link.made_up = 2
"""


def test_planted_violations_are_caught():
    found = check(
        {
            LINK: LINK_SRC,
            "link/tx.py": TX_SRC,
            "link/rx.py": RX_SRC,
            "bus.py": "def f(link):\n    link._n = 1\n",
        }
    )[1]
    want = [
        "link/link.py: end_session does not call link/rx.py reset()",
        "link/link.py:17: end_session sets status as __init__ does: its owner's reset()",
        "link/link.py:18: self._late is not set in __init__",
        "link/link.py:19: end_session sets _snap, which link/tx.py reset() sets",
        "link/tx.py:3: _q is set in __init__ and reset()",
        "bus.py:2: link._n belongs to link/rx.py",
        "link/rx.py:5: link._q belongs to link/tx.py",
        "link/rx.py:6: link._snap belongs to link/tx.py",
        "link/rx.py:8: link.made_up is no Link field (set it in __init__)",
    ]
    assert sorted(found) == sorted(want)


def test_a_link_keeps_to_97_fields():
    """MicroPython keeps an instance's attributes in a table that grows from
    97 entries to 98 by 480 bytes on a 64-bit board (the device heap test ran
    out): a field more must take the place of one."""
    import edgebus
    from edgebus.link.link import Link

    assert len(vars(Link(edgebus.Bus(), "n"))) <= 97


HOOK_SRC = """
class Link:
    HOOKS = ("on_gap",)

    def __init__(self):
        # -- link.py: configuration --
        self.node = 1
        tx.init(self)

    def end_session(self, why):
        tx.reset(self)
"""
INIT_SRC = """def init(link):
    link._q = []
    reset(link)

def reset(link):
    link._q = None
    link.on_gap = None
"""


def test_an_owners_init_and_the_hooks_are_checked():
    found = check(
        {
            LINK: HOOK_SRC,
            "link/tx.py": INIT_SRC,
            "link/rx.py": "def init(link):\n    link._n = 0\n",
            "bridge/x.py": "def f(link):\n    link.on_gap = print\n    link._q = 1\n",
        }
    )[1]
    assert sorted(found) == [
        "bridge/x.py:3: link._q belongs to link/tx.py",
        "link/link.py: __init__ does not call link/rx.py init()",
        "link/tx.py:6: _q is set in link/tx.py init() and reset()",
        "link/tx.py:7: link.on_gap is the owner's hook",
    ]
