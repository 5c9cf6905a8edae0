"""`edgebus status`: a snapshot of a running bridge (links, peers,
generations, queues, drop/gap/error counters), asked over its socket page by
page (the bridge's side: bridge/status.py)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

import edgebus
from edgebus.bridge.split import worker_of
from edgebus.client.local import ERRORS, attach_local
from edgebus.tools.commands import busclient as bc

if TYPE_CHECKING:
    import argparse
    from collections.abc import Awaitable, Callable

EPILOG = (
    "Exit codes: 0 ok, 2 usage, 5 the bridge did not answer within --timeout, "
    "6 bridge unreachable (docs/shell.md)."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    bc.add_socket(p, EPILOG)
    p.add_argument("--json", action="store_true", help="print the raw JSON")
    p.add_argument("--link", metavar="ID", help="only this link (e.g. mqtt:pump-4)")
    p.add_argument(
        "--summary", action="store_true", help="the bridge and the fleet's totals, no row per link"
    )
    p.add_argument("--timeout", type=float, default=3.0)


async def pages(
    call: Callable[[str, Any], Awaitable[Any]], req: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The bridge's answer to bridge/status ``req``, through ``call(topic,
    payload)``; with ``req`` None every page of it, the links joined."""
    st: dict[str, Any] = await call("bridge/status", req)
    while req is None and st.get("next") is not None:
        more = await call("bridge/status", {"from": st["next"]})
        st["links"].update(more["links"])
        st["next"] = more["next"]
    return st


async def fetch(
    path: str, timeout: float = 3.0, req: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The bridge's status, every page of it (or the one ``req`` asks for)."""
    bus = edgebus.Bus()
    link, task = await attach_local(
        bus,
        path,
        node="status",
        exports=(),
        imports=(),
        export_calls=(),
        import_calls=[("bridge/#", "")],
    )
    try:
        for _ in range(int(timeout / 0.02)):
            if ("bridge", "status") in bus.endpoints():
                break
            await asyncio.sleep(0.02)
        c = bus.connect()
        return await pages(lambda t, p: c.call(t, p, timeout=timeout), req)
    finally:
        await link.close("done")
        task.cancel()


def _note(s: dict[str, Any]) -> str:
    """The last column: a device asleep's wake (bridge/mailbox.py), else the last error."""
    t = s.get("asleep_until")
    if t is None:
        return s.get("last_error") or ""
    at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    return ("asleep until %s" if s["state"] == "asleep" else "overslept its wake at %s") % at


def _log_lines(lg: dict[str, Any]) -> list[str]:
    """The log's lines: its counters, its health (what a failed log waits
    for, the disk's free space when it is low)."""
    L = [
        "log %s: %d appended, %d dropped, %d errors, at segment %s offset %s; "
        "%d syncs (every %g ms at most, last %s ms), %d unsynced"
        % (
            lg["dir"],
            lg["appended"],
            lg["dropped"],
            lg["errors"],
            *lg["position"],
            lg["syncs"],
            lg["commit_ms"],
            lg["last_sync_ms"],
            lg["unsynced"],
        )
    ]
    if "state" in lg:
        L.append(
            "log health: %s: %d of %d queued (durable links held from %d), %d data "
            "frames held back so far; failed %d time(s), resumed %d"
            % (
                lg["state"].upper() if lg["state"] != "ok" else "ok",
                lg["queued"],
                lg["queue_len"],
                lg["high_water"],
                lg["held"],
                lg.get("failures", 0),
                lg.get("resumed", 0),
            )
        )
    if lg.get("failed"):
        L.append(
            "log FAILED since %s: %s; nothing is acknowledged (the devices keep their "
            "readings spooled); retry %d in %s s: it resumes by itself once the disk takes "
            "writes (free space, or bound the log with [log] retention_bytes)"
            % (
                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(lg["failed_since"])),
                lg["failed"],
                lg["retries"] + 1,
                lg["retry_in"],
            )
        )
    free, least = lg.get("free_bytes"), lg.get("min_free_bytes")
    if free is not None:
        L.append(
            "log disk: %d bytes free%s"
            % (
                free,
                " (LOW: under [log] min_free_bytes %d; set [log] retention_bytes)" % least
                if least and free < least
                else "",
            )
        )
    return L


def render(st: dict[str, Any]) -> str:
    L = [
        "bridge %s  up %ss  bus: %d connections, %d retained, %d dropped, %d disconnected "
        "(could not keep up)"
        % (
            st["node"],
            st["uptime"],
            st["bus"]["connections"],
            st["bus"]["retained"],
            st["bus"]["dropped"],
            st["bus"].get("overflows", 0),
        )
    ]
    lg = st.get("log")
    if lg:
        L += _log_lines(lg)
    mq = st.get("mqtt")
    if mq:
        L.append(
            "mqtt: %s, %d device(s)%s, %d unknown device(s) refused, broker dropped %s"
            % (
                "connected"
                if mq["connected"]
                else "NOT CONNECTED (%s)" % (mq.get("last_error") or "connecting"),
                mq.get("devices", 0),
                " (shard)" if mq.get("shard") else "",
                mq["unknown_devices"],
                "?" if mq.get("broker_dropped") is None else mq["broker_dropped"],
            )
        )
    f = st.get("fleet")
    if f:
        L.append(_fleet_line(f))
    if st["links"]:
        L += [""] + _link_table(st["links"])
    return "\n".join(L)


def _fleet_line(f: dict[str, Any]) -> str:
    """The links' totals: how many in each state, frames, gaps, errors."""
    c = f["counters"]
    return "links %d: %s; frames %d in, %d out; %d gaps, %d errors" % (
        f["links"],
        ", ".join("%d %s" % (n, s) for s, n in sorted(f["states"].items())) or "none",
        c.get("frames_in", 0),
        c.get("frames_out", 0),
        c.get("gaps", 0),
        sum(c.get(k, 0) for k in ERRORS),
    )


def _link_table(links: dict[str, Any]) -> list[str]:
    """A line per link under a header: state, peer, counters, its last error."""
    L = [
        "%-22s %-10s %-14s %4s %7s %7s %6s %6s %6s %s"
        % ("LINK", "STATE", "PEER", "GEN", "IN", "OUT", "GAPS", "DROPS", "ERRS", "LAST ERROR")
    ]
    for lid, s in links.items():
        c = s["counters"]
        errs = sum(c.get(k, 0) for k in ERRORS) + sum(
            (s.get("transport") or {}).get(k, 0) for k in ("crc_errors", "cobs_errors")
        )
        L.append(
            "%-22s %-10s %-14s %4s %7d %7d %6d %6d %6d %s"
            % (
                lid[:22],
                s["state"],
                (s.get("peer") or "-")[:14],
                s.get("generation") or "-",
                c.get("frames_in", 0),
                c.get("frames_out", 0),
                c.get("gaps", 0),
                c.get("dropped_out", 0) + c.get("dropped_down", 0),
                errs,
                _note(s),
            )
        )
    return L


async def _ask(path: str, timeout: float, req: dict[str, Any] | None) -> dict[str, Any]:
    """fetch(), its failures as the command's (bc.Fail)."""
    try:
        return await fetch(path, timeout, req)
    except OSError as e:
        raise bc.unreachable(path, e) from None
    except edgebus.Timeout:
        raise bc.Fail(
            bc.TIMEOUT, "the bridge at %s did not answer within %g s" % (path, timeout)
        ) from None
    except edgebus.CallError as e:
        raise bc.Fail(bc.FAILED, str(e)) from None


def _holder(link: str, n: int) -> int:
    """The worker (of ``n``) that holds link id ``link``: an MQTT device's by
    its node id (bridge/split.py); serial, peer and local links are worker 0's."""
    kind, _, node = link.partition(":")
    return worker_of(node, n) if kind == "mqtt" else 0


async def _workers(
    sup: dict[str, Any], first: dict[str, Any], timeout: float, req: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """Every worker's status, worker 0's (``first``) already in hand; one
    that does not answer is {"worker": [i, n], "error": why}."""
    socks = sup["sockets"]
    out = [first]
    for i, path in enumerate(socks[1:], 1):
        try:
            out.append(await _ask(path, timeout, req))
        except bc.Fail as e:
            out.append({"worker": [i, len(socks)], "error": str(e)})
    return out


def render_workers(sup: dict[str, Any], sts: list[dict[str, Any]]) -> str:
    """A bridge of several workers: a line each (pid, restarts), the fleet's
    totals over all, then each worker's own status."""
    L = ["bridge of %d workers (supervisor pid %s)" % (len(sts), sup.get("pid"))]
    fleets = []
    for w, st in zip(sup["workers"], sts):
        if "error" in st:
            what = "NOT ANSWERING: %s" % st["error"]
        else:
            f = st.get("fleet") or {}
            fleets.append(f)
            what = "%d link(s)" % f.get("links", 0)
        L.append(
            "  worker %d: pid %s, up since %s, %d restart(s)%s%s; %s"
            % (
                w["worker"],
                w["pid"] or "-",
                time.strftime("%H:%M:%S", time.localtime(w["since"])),
                w["restarts"],
                ", %d killed as hung" % w["hangs"] if w.get("hangs") else "",
                "" if w["last_exit"] is None else " (last exit status %s)" % w["last_exit"],
                what,
            )
        )
    if fleets:
        L.append("all workers: " + _fleet_line(_sum_fleets(fleets)))
    for w, st in zip(sup["workers"], sts):
        if "error" not in st:
            L += ["", "== worker %d ==" % w["worker"], render(st)]
    return "\n".join(L)


def _sum_fleets(fleets: list[dict[str, Any]]) -> dict[str, Any]:
    states: dict[str, int] = {}
    counters: dict[str, int] = {}
    for f in fleets:
        for k, v in f.get("states", {}).items():
            states[k] = states.get(k, 0) + v
        for k, v in f.get("counters", {}).items():
            counters[k] = counters.get(k, 0) + v
    return {"links": sum(f.get("links", 0) for f in fleets), "states": states, "counters": counters}


async def status(args: argparse.Namespace) -> None:
    path = bc.socket_path(args)
    req = {"link": args.link} if args.link else {"links": False} if args.summary else None
    if args.link:  # the worker that holds it, in a bridge of several
        head = await _ask(path, args.timeout, {"links": False})
        sup = head.get("workers")
        if sup:
            path = sup["sockets"][_holder(args.link, len(sup["sockets"]))]
    st = await _ask(path, args.timeout, req)
    sup = None if args.link else st.get("workers")
    if not sup:
        bc.emit(json.dumps(st, indent=1) if args.json else render(st))
        return
    sts = await _workers(sup, st, args.timeout, req)
    if args.json:
        bc.emit(json.dumps({"supervisor": sup, "workers": sts}, indent=1))
    else:
        bc.emit(render_workers(sup, sts))


def run(args: argparse.Namespace) -> int:
    return bc.main("status", status(args))
