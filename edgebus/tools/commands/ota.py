"""`edgebus ota`: update devices over the bus, through the bridge's socket
under its ACL (docs/devices.md, "Updates over the bus").

push --bundle DIR --to PATTERN: the bundle `edgebus build` made (its
ota.jsonl) to the devices whose node names match the shell glob PATTERN and
whose board is the bundle's: a canary wave, then the rest in waves; a wave
where more than --halt rolled back or failed stops the push. status
[PATTERN]: each device's running bundle, slot, state, trial and last
failure. rollback NODE: the device goes back to its previous bundle. The
device's side: firmware/services/ota.py; the push itself: otapush."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING, Any

from edgebus.tools.commands import busclient as bc
from edgebus.tools.commands import otaplan as plan
from edgebus.tools.commands.otapush import Pusher
from edgebus.tools.commands.status import pages as status_pages

if TYPE_CHECKING:
    from edgebus.view import RetainedView

INFO, OTA = "dev/+/sys/info", "dev/+/sys/ota"
# Exit code of a push where a device rolled back or failed (the lines say which).
NOT_ALL = 1
SHOWN = 8  # node names listed per wave in the plan
EPILOG = (
    "Exit codes: 0 every device committed or already ran the bundle, 1 a device rolled "
    "back or failed (or the push halted, or was not confirmed), 2 usage or a bad bundle, "
    "3 denied by the bridge's ACL, 4 no device matches, 5 timeout, 6 bridge unreachable, "
    "7 bridge went away, 8 call failed."
)


def _share(text: str) -> plan.Share:
    try:
        return plan.parse_share(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError("%r: a whole number of at least 1" % text)
    return n


def _seconds(text: str) -> float:
    try:
        s = float(text)
    except ValueError:
        s = 0.0
    if not s > 0:
        raise argparse.ArgumentTypeError("%r: seconds, more than 0" % text)
    return s


def _trial(text: str) -> float:
    s = _seconds(text)
    lo, hi = plan.TRIAL_S
    if not lo <= s <= hi:
        raise argparse.ArgumentTypeError("%r: seconds from %d to %d" % (text, lo, hi))
    return s


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    pu = sub.add_parser("push", help="send a bundle to devices, in waves, and switch them to it")
    _push_arguments(pu)
    st = sub.add_parser("status", help="each device's running bundle, slot, state, last failure")
    st.add_argument("pattern", nargs="?", default="*", help="node names, a shell glob (all)")
    st.add_argument("--json", action="store_true", help="a JSON list, a device each")
    st.add_argument(
        "--timeout", type=_seconds, default=10.0, metavar="S", help="seconds (%(default)s)"
    )
    bc.add_socket(st)
    rb = sub.add_parser("rollback", help="NODE goes back to its previous bundle (it reboots)")
    rb.add_argument("node")
    rb.add_argument(
        "--factory", action="store_true", help="to the factory (frozen or installed) modules"
    )
    rb.add_argument(
        "--timeout", type=_seconds, default=10.0, metavar="S", help="seconds (%(default)s)"
    )
    bc.add_socket(rb)
    for q in (pu, st, rb):
        q.epilog = EPILOG


def _push_arguments(pu: argparse.ArgumentParser) -> None:
    """`edgebus ota push`'s options: the bundle, the devices, the waves."""
    pu.add_argument("--bundle", required=True, metavar="DIR", help="`edgebus build`'s directory")
    pu.add_argument(
        "--to", required=True, metavar="PATTERN", help="node names, a shell glob ('*', 'pump-*')"
    )
    pu.add_argument(
        "--canary",
        type=_share,
        default="10%",
        metavar="N|P%",
        help="the first wave: a share (at least one device) or a count (%(default)s)",
    )
    pu.add_argument(
        "--wave",
        type=_share,
        metavar="N|P%",
        help="the later waves' size: a count or a share (default: all the rest in one)",
    )
    pu.add_argument(
        "--halt",
        type=_share,
        default="20%",
        metavar="N|P%",
        help="stop when more than this of a wave rolled back or failed (%(default)s)",
    )
    pu.add_argument(
        "--parallel",
        type=_positive,
        default=8,
        metavar="N",
        help="devices at once in a wave (%(default)s)",
    )
    pu.add_argument(
        "--trial-s",
        type=_trial,
        default=120.0,
        metavar="S",
        help="seconds a device has to commit the new bundle before it rolls back (%(default)s)",
    )
    pu.add_argument(
        "--timeout",
        type=_seconds,
        default=20.0,
        metavar="S",
        help="seconds for a device's answer, or for its route while it reconnects (%(default)s)",
    )
    pu.add_argument(
        "--full",
        action="store_true",
        help="send every file, none copied from what the device already holds",
    )
    pu.add_argument(
        "--no-compress",
        action="store_true",
        help="send the files as they are, even to a device that decodes deflate",
    )
    pu.add_argument("--yes", "-y", action="store_true", help="push without asking")
    bc.add_socket(pu)


def _session(args: argparse.Namespace) -> bc.Session:
    return bc.Session(bc.socket_path(args), imports=[(INFO, ""), (OTA, "")])


async def _devices(s: bc.Session) -> tuple[dict[str, Any], dict[str, Any], RetainedView]:
    """({node: sys/info}, {node: sys/ota}, the sys/ota view kept up to date)."""
    for pattern in (INFO, OTA):
        await s.check("watch_retained", pattern, "you may not read %s" % pattern)
    await s.synced()
    views = [s.conn.retained_view(p) for p in (INFO, OTA)]
    infos, otas = [
        {str(m.topic[1]): m.payload for m in v.snapshot() if isinstance(m.payload, dict)}
        for v in views
    ]
    return infos, otas, views[1]


def _names(nodes: list[str]) -> str:
    more = len(nodes) - SHOWN
    return ", ".join(nodes[:SHOWN]) + (" and %d more" % more if more > 0 else "")


def wave_name(i: int, canary: bool) -> str:
    return "canary" if canary and i == 0 else "wave %d" % (i + 1)


def describe(bundle: plan.Bundle, waves: list[list[str]], canary: bool) -> list[str]:
    """The plan's lines: the bundle, then each wave."""
    out = [
        "bundle %s for board %s: %d files, %d bytes"
        % (bundle.short(), bundle.board, len(bundle.paths) - 1, bundle.total)
    ]
    for i, w in enumerate(waves):
        out.append("%s (%d): %s" % (wave_name(i, canary), len(w), _names(w)))
    return out


async def _confirm(question: str) -> None:
    if not sys.stdin.isatty():
        raise bc.Fail(2, "nothing to confirm at (stdin is not a terminal): pass --yes")
    # In a thread, so the session's heartbeats go on while the user reads.
    answer = await asyncio.to_thread(input, question + " [y/N] ")
    if answer.strip().lower() not in ("y", "yes"):
        raise bc.Fail(NOT_ALL, "not pushed")


async def push(args: argparse.Namespace) -> int:
    try:
        bundle = plan.load_bundle(args.bundle)
    except plan.BundleError as e:
        raise bc.Fail(2, str(e)) from None
    async with _session(args) as s:
        infos, otas, view = await _devices(s)
        targets, other = plan.select(infos, args.to, bundle.board)
        for node, board in other:
            bc.emit("%s: skipped: board %s, the bundle is for %s" % (node, board, bundle.board))
        if not targets:
            raise bc.Fail(
                bc.NO_ROUTE,
                "no device%s matches %r (%d device(s) on the bridge)"
                % (" of board " + bundle.board if other else "", args.to, len(infos)),
            )
        done = [
            plan.Outcome(n, plan.ALREADY, bundle.version)
            for n in targets
            if plan.runs(otas.get(n), bundle.hash)
        ]
        todo = [n for n in targets if not plan.runs(otas.get(n), bundle.hash)]
        waves = plan.plan_waves(todo, args.canary, args.wave)
        canary = plan.canary_size(args.canary, len(todo)) > 0
        for line in describe(bundle, waves, canary):
            bc.emit(line)
        for o in done:
            bc.emit(o.line())
        for n in todo:
            await s.check("call", plan.OP % n, "you may not update %s" % n)
        if todo and not args.yes:
            await _confirm("push %s to %d device(s)?" % (bundle.short(), len(todo)))
        pusher = Pusher(
            s, bundle, view, args.trial_s, args.timeout, args.full, not args.no_compress
        )
        untouched = 0
        for i, nodes in enumerate(waves):
            got = await pusher.wave(nodes, args.parallel, wave_name(i, canary))
            done += got
            bad = [o for o in got if not o.ok()]
            if bad and plan.too_many(len(bad), len(nodes), args.halt) and i + 1 < len(waves):
                untouched = sum(len(w) for w in waves[i + 1 :])
                print(
                    "edgebus ota push: halted after the %s: %d of %d rolled back or failed "
                    "(more than --halt allows); %d device(s) untouched:\n  %s"
                    % (
                        wave_name(i, canary),
                        len(bad),
                        len(nodes),
                        untouched,
                        "\n  ".join(o.line() for o in bad),
                    ),
                    file=sys.stderr,
                )
                break
    bc.emit(plan.summary(done, untouched, len(other)))
    return 0 if not untouched and all(o.ok() for o in done) else NOT_ALL


async def _links(s: bc.Session, timeout: float) -> dict[str, dict[str, Any]]:
    """{device node: its link's {"state", "since"}} from the bridge's status
    pages: a row's state is the device's last word, which stays on the bus
    when it goes offline or hangs."""
    st = await status_pages(lambda t, p: s.call(t, p, timeout))
    return {
        str(lk["peer"]): {"state": lk.get("state"), "since": lk.get("since")}
        for lk in st["links"].values()
        if lk.get("peer")
    }


async def status(args: argparse.Namespace) -> None:
    async with _session(args) as s:
        infos, otas, _ = await _devices(s)
        links = await _links(s, args.timeout)
    rows = plan.status_rows(infos, otas, args.pattern, links)
    if not rows:
        raise bc.Fail(bc.NO_ROUTE, "no device matches %r" % args.pattern)
    bc.emit(json.dumps(rows) if args.json else plan.render_status(rows))


async def rollback(args: argparse.Namespace) -> None:
    req = {"op": "rollback", "to": "factory"} if args.factory else {"op": "rollback"}
    async with _session(args) as s:
        r = await s.call(plan.OP % args.node, req, args.timeout)
    to = r.get("to") if isinstance(r, dict) else None
    bc.emit("%s: rolling back to %s (it reboots)" % (args.node, to or "the factory modules"))


def run(args: argparse.Namespace) -> int:
    act = {"push": push, "status": status, "rollback": rollback}[args.action]
    return bc.main("ota " + args.action, act(args))
