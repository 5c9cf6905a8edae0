"""The live fleet page beside /metrics: ``/fleet`` (fleet.html, one file, no
external resources) and ``/fleet.json``, a device a row, filtered, sorted and
paged here (``?q=&state=&sort=&page=&per=``), so a browser never holds more
than a page of a fleet of any size. Read-only, computed on request from what
the bridge already keeps: each link's state, counters, spool and round trip,
the mailbox's sleeps, and the devices' retained ``sys/info`` and ``sys/ota``
(two retained views: a device's retain of either updates a dict entry; no
reading passes through here). ``sys/health`` is published, not retained: a
subscription keeps each device's latest report (a summary: uptime, free heap,
its own spool's fill, its errors), so the health column and the device's spool
are its last word, with ``sys/info`` (reset cause, board, firmware) beside it."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import urllib.parse
import urllib.request
from importlib import resources
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any, Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from edgebus import compat
from edgebus.bridge.status import state
from edgebus.client.local import ERRORS

if TYPE_CHECKING:
    from edgebus.bridge.context import BridgeView
    from edgebus.link.link import Link

WAIT = 10.0  # seconds a request waits for the event loop (as a scrape does)
PER, MAX_PER = 50, 500  # rows a page: by default, at most
CHUNK = 250  # links a turn of the event loop makes rows for (a few ms)
RATE_WINDOW = 5.0  # s: readings/s are over the last 5-10 s of requests
# Sort keys: a row's value for each (None sorts last either way).
SORTS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "id": lambda r: r["id"],
    "state": lambda r: r["state"],
    "seen": lambda r: r["seen"],
    "rate": lambda r: r["rate"],
    "spool": lambda r: r["spool"][0] / r["spool"][1] if r["spool"] and r["spool"][1] else None,
    "rtt": lambda r: r["rtt_ms"],
    "refused": lambda r: r["forged"] + r["replayed"],
    "errors": lambda r: r["errors"],
    "bundle": lambda r: _str((r["bundle"] or {}).get("version")),
    "ota": lambda r: _str((r["ota"] or {}).get("state")),
}
INFO, OTA, HEALTH = "dev/+/sys/info", "dev/+/sys/ota", "dev/+/sys/health"
# What a device's sys/health report keeps here (firmware/services/health.py):
# a summary, so 10,000 devices hold a few MB at most.
HEALTH_KEYS = ("uptime", "mem_free", "mem_alloc", "service_errors", "health_skipped")
LINK_KEYS = ("memory_errors", "send_errors", "dropped_out")
# What its uplink's transport refused (uplink.transport, only those not 0):
# an outsider's oversize message on its down topic shows here
TRANSPORT_KEYS = ("oversize", "crc_errors", "cobs_errors", "garbage_bytes", "silent")


def _str(v: Any) -> str | None:
    """A device's word as a sort key: text, whatever type it sent (or None)."""
    return None if v is None else str(v)


def page_html() -> bytes:
    """fleet.html, as the package ships it."""
    return resources.files("edgebus.bridge").joinpath("fleet.html").read_bytes()


def _retained(view: Any, node: str | None, leaf: str) -> dict[str, Any] | None:
    m = view.get(("dev", node, "sys", leaf)) if node else None
    return m.payload if m is not None and isinstance(m.payload, dict) else None


def _health(info: dict[str, Any] | None, rep: dict[str, Any] | None) -> dict[str, Any] | None:
    """The health column: the device's last sys/health summary (``at``: its
    wall time here) over what its retained sys/info says."""
    if info is None and rep is None:
        return None
    h = {k: (info or {}).get(k) for k in ("uptime", "mem_free", "reset_cause", "fw", "board")}
    if rep is not None:
        h.update(rep)
    return h


def _count(v: Any) -> bool:
    """Whether a device's counter ``v`` is a count above 0."""
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def summary(payload: Any, wall: float) -> dict[str, Any] | None:
    """What is kept of a sys/health report: HEALTH_KEYS, the link's
    LINK_KEYS and its spool's bytes and capacity ("dev_spool"), the
    transport's refusals above 0 ("transport", TRANSPORT_KEYS), and ``at``."""
    if not isinstance(payload, dict):
        return None
    out = {k: payload.get(k) for k in HEALTH_KEYS}
    lk = payload.get("link")
    lk = lk if isinstance(lk, dict) else {}
    for k in LINK_KEYS:
        out[k] = lk.get(k)
    sp = lk.get("spool")
    sp = sp if isinstance(sp, dict) else {}
    b, cap = sp.get("bytes"), sp.get("capacity")
    ok = all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (b, cap))
    out["dev_spool"] = [b, cap] if ok else None
    up = payload.get("uplink")
    tr = up.get("transport") if isinstance(up, dict) else None
    tr = tr if isinstance(tr, dict) else {}
    out["transport"] = {k: v for k in TRANSPORT_KEYS if _count(v := tr.get(k))} or None
    out["at"] = round(wall, 1)
    return out


def _ota(ota: dict[str, Any] | None) -> dict[str, Any] | None:
    if ota is None:
        return None
    fail, trial = ota.get("last_failure"), ota.get("trial")
    return {
        "state": ota.get("state"),
        "trial": trial.get("version") if isinstance(trial, dict) else None,
        "failure": fail.get("reason") if isinstance(fail, dict) else None,
        "rollbacks": ota.get("rollbacks"),
    }


def row(
    lk: Link,
    st: str,
    until: float | None,
    views: tuple[Any, Any],
    now: float,
    wall: float,
    health: dict[str, dict[str, Any]] | None = None,
) -> dict:
    """A device's row, from its link, its retained sys/info and sys/ota and
    its last sys/health (``health``: node -> summary())."""
    c = lk.counters
    sp = lk.spool_stats()
    node = lk.peer_node or lk.peer
    info, ota = _retained(views[0], node, "info"), _retained(views[1], node, "ota")
    rep = health.get(node) if health is not None and node else None
    bundle = (ota or {}).get("running") or (info or {}).get("bundle")
    age = lk.state_age()
    return {
        "id": lk.link_id,
        "node": node,
        "state": st,
        "since": round(wall - age, 1),
        # Up: since its latest frame (the link's liveness clock); else since its session ended.
        "seen": round(lk.heard_age() if st == "up" else age, 1),
        "until": until,
        "imported": c.get("imported", 0),
        "spool": [sp["bytes"], sp["capacity"]],
        "rtt_ms": None if lk.rtt is None else round(lk.rtt * 1000, 1),
        "forged": c.get("forged", 0),
        "replayed": c.get("replayed", 0) + c.get("replays", 0),
        "errors": sum([c.get(k, 0) for k in ERRORS]),
        "gaps": c.get("gaps", 0),
        "last_error": lk.last_error,
        "health": _health(info, rep),
        "bundle": bundle if isinstance(bundle, dict) else None,
        "ota": _ota(ota),
    }


async def rows(
    bridge: BridgeView,
    views: tuple[Any, Any],
    chunk: int = CHUNK,
    health: dict[str, dict[str, Any]] | None = None,
) -> tuple[list, float]:
    """Every device link's row (a host client's local link is no device), made
    on the event loop ``chunk`` links at a time, letting the loop run between;
    and the longest the loop was held (s)."""
    out = []
    mb = bridge.mailbox
    items = [kv for kv in bridge.links.items() if not kv[0].startswith("local:")]
    held = 0.0
    for i in range(0, len(items), chunk):
        if i:
            await asyncio.sleep(0)
        t0 = time.perf_counter()
        now, wall = compat.now(), time.time()
        for _, lk in items[i : i + chunk]:
            st = state(lk, mb)
            sl = mb.sleep_of(lk.peer) if st in ("asleep", "overslept") else None
            out.append(row(lk, st, sl["until"] if sl else None, views, now, wall, health))
        held = max(held, time.perf_counter() - t0)
    return out, held


class Rates:
    """Readings/s per link from the ``imported`` counter between requests:
    against a baseline 5-10 s old (younger at the first requests)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.old: tuple[float, dict[str, int]] | None = None
        self.new: tuple[float, dict[str, int]] | None = None

    def apply(self, rs: list[dict[str, Any]], now: float) -> None:
        counts = {r["id"]: r["imported"] for r in rs}
        with self.lock:
            if self.old is None or self.new is None:
                self.old = self.new = (now, counts)
            elif now - self.new[0] >= RATE_WINDOW:
                self.old, self.new = self.new, (now, counts)
            t0, base = self.old
        dt = now - t0
        for r in rs:
            b = base.get(r["id"])
            # A link made anew (a reload) counts from 0 again: no rate for it yet.
            ok = b is not None and dt > 0.5 and r["imported"] >= b
            r["rate"] = round((r["imported"] - b) / dt, 2) if ok else None


def params(qs: str) -> dict[str, Any]:
    """The query string's q, state, sort, page and per, checked and bounded."""
    p = urllib.parse.parse_qs(qs)

    def one(k: str, default: str) -> str:
        return p.get(k, [default])[-1]

    sort = one("sort", "id")
    if sort.lstrip("-") not in SORTS:
        raise ValueError("sort must be one of %s (with - for descending)" % ", ".join(SORTS))
    try:
        page, per = int(one("page", "0")), int(one("per", str(PER)))
        upto = int(one("upto", "0"))
    except ValueError:
        raise ValueError("page, per and upto are whole numbers")
    return {
        "q": one("q", "").strip().lower(),
        "state": one("state", ""),
        "sort": sort,
        "page": max(0, page),
        "per": min(max(1, per), MAX_PER),
        "upto": max(0, upto),  # the supervisor's: the first upto rows instead of a page
    }


def _text(r: dict[str, Any]) -> str:
    b, o = r["bundle"] or {}, r["ota"] or {}
    bits = (r["id"], r["state"], b.get("version"), b.get("hash"), o.get("state"), r["last_error"])
    return " ".join(str(x) for x in bits if x).lower()


def order(rs: list[dict[str, Any]], sort: str) -> list[dict[str, Any]]:
    """``rs`` sorted by ``sort`` ("-key": descending), rows without a value
    last, ties by id."""
    desc, key = sort.startswith("-"), SORTS[sort.lstrip("-")]
    rs = sorted(rs, key=lambda r: r["id"])
    have = [r for r in rs if key(r) is not None]
    return sorted(have, key=key, reverse=desc) + [r for r in rs if key(r) is None]


def select(rs: list[dict[str, Any]], p: dict[str, Any]) -> dict[str, Any]:
    """The answer for params ``p``: the fleet's counts by state, then the rows
    matching q (a substring of id, state, bundle, update state or last
    error) and state, sorted, the page's."""
    states: dict[str, int] = {}
    for r in rs:
        states[r["state"]] = states.get(r["state"], 0) + 1
    q, want = p["q"], p["state"]
    hit = [r for r in rs if (not want or r["state"] == want) and (not q or q in _text(r))]
    per = p["per"]
    start, end = (0, p["upto"]) if p["upto"] else (p["page"] * per, (p["page"] + 1) * per)
    return {
        "total": len(rs),
        "states": states,
        "matched": len(hit),
        "page": p["page"],
        "per": per,
        "pages": max(1, -(-len(hit) // per)),
        "rows": order(hit, p["sort"])[start:end],
    }


class FleetPage:
    """/fleet.json for one bridge: rows read on its event loop (where the
    links live), filtered, sorted and paged on the HTTP server's thread."""

    def __init__(self, bridge: BridgeView) -> None:
        self.bridge = bridge
        self.loop = asyncio.get_running_loop()
        self.views = (bridge.conn.retained_view(INFO), bridge.conn.retained_view(OTA))
        self.rates = Rates()
        self.health: dict[str, dict[str, Any]] = {}
        # A report every health_period (10 s) a device: at 10,000 devices
        # ~1,000 a second through this feed, dropped oldest if it falls behind.
        self.reports = bridge.conn.subscribe(HEALTH, queue_len=256)
        self.keeper = asyncio.ensure_future(self._keep())

    async def _keep(self) -> None:
        """Each device's latest sys/health summary, until the bus closes."""
        async for m in self.reports:
            s = summary(m.payload, time.time())
            if s is not None:
                self.health[str(m.topic[1])] = s

    def answer(self, qs: str) -> dict[str, Any]:
        p = params(qs)
        t0 = time.perf_counter()
        work = rows(self.bridge, self.views, health=self.health)
        rs, held = asyncio.run_coroutine_threadsafe(work, self.loop).result(WAIT)
        t1 = time.perf_counter()
        self.rates.apply(rs, time.monotonic())
        out = select(rs, p)
        cfg = self.bridge.cfg
        out.update(
            bridge=cfg.node,
            worker=None if cfg.worker is None else [cfg.worker, cfg.workers],
            generated=round(time.time(), 3),
            rows_ms=round((t1 - t0) * 1000, 1),
            loop_held_ms=round(held * 1000, 1),
            took_ms=round((time.perf_counter() - t0) * 1000, 1),
        )
        return out


def merged(ports: Iterable[int | None], qs: str, node: str, wait: float = WAIT) -> dict:
    """The supervisor's /fleet.json: each worker's rows matching the query,
    up to the end of the page asked for (from its loopback listener), with
    the worker's number, sorted and paged again over all; the counts summed."""
    t0 = time.perf_counter()
    p = params(qs)
    deep = dict(p, upto=(p["page"] + 1) * p["per"])
    deep_qs = urllib.parse.urlencode({k: v for k, v in deep.items() if v != ""})
    rs: list[dict[str, Any]] = []
    states: dict[str, int] = {}
    total = matched = 0
    up = []
    for i, port in enumerate(ports):
        try:
            if port is None:
                raise OSError("not serving yet")
            url = "http://127.0.0.1:%d/fleet.json?%s" % (port, deep_qs)
            with urllib.request.urlopen(url, timeout=wait) as r:
                a = json.loads(r.read())
        except (OSError, ValueError):
            up.append(False)
            continue
        up.append(True)
        total, matched = total + a["total"], matched + a["matched"]
        for k, n in a["states"].items():
            states[k] = states.get(k, 0) + n
        rs += [dict(r, worker=i) for r in a["rows"]]
    start = p["page"] * p["per"]
    return {
        "total": total,
        "states": states,
        "matched": matched,
        "page": p["page"],
        "per": p["per"],
        "pages": max(1, -(-matched // p["per"])),
        "rows": order(rs, p["sort"])[start : start + p["per"]],
        "bridge": node,
        "workers": up,
        "generated": round(time.time(), 3),
        "took_ms": round((time.perf_counter() - t0) * 1000, 1),
    }


# -- the HTTP server: prometheus-client's /metrics app, /fleet and /fleet.json beside it


# The page shows text devices and peers supplied (an error's words): it sets
# it as text, and these headers keep even a slip from loading or sending
# anything elsewhere, from being framed or from being sniffed as another type.
HARDEN = [
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        "connect-src 'self'; img-src data:; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
]


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # as prometheus-client's: a request never holds up the exit


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def app(metrics: Callable[..., Any], fleet: Callable[[str], dict[str, Any]]) -> Callable[..., Any]:
    """A WSGI app: GET /fleet (the page), /fleet.json (``fleet(query
    string)``), anything else to ``metrics`` (prometheus-client's app)."""
    html = page_html()

    def serve(env: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        path = env.get("PATH_INFO", "")
        if path not in ("/fleet", "/fleet.json"):
            return metrics(env, start)
        if env.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            start("405 Method Not Allowed", [("Allow", "GET, HEAD")])
            return [b"read-only\n"]
        if path == "/fleet":
            body, ctype, status = html, "text/html; charset=utf-8", "200 OK"
        else:
            try:
                body = json.dumps(fleet(env.get("QUERY_STRING", ""))).encode()
                ctype, status = "application/json", "200 OK"
            except ValueError as e:
                body, ctype, status = str(e).encode(), "text/plain", "400 Bad Request"
            except Exception as e:  # the loop too busy (a timeout), the bridge stopping
                body, ctype, status = repr(e).encode(), "text/plain", "503 Service Unavailable"
        start(status, [("Content-Type", ctype), ("Cache-Control", "no-store")] + HARDEN)
        return [body]

    return serve


def start_server(addr: str, wsgi: Callable[..., Any]) -> tuple[Any, threading.Thread]:
    """Serve ``wsgi`` on ``addr`` ("host:port"; IPv6 too) from a daemon thread,
    a thread a request, as prometheus-client's start_http_server: (server, thread)."""
    host, _, port = addr.rpartition(":")
    fam, _, _, _, sa = socket.getaddrinfo(
        host.strip("[]") or None, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]

    class Server(_Server):
        address_family = fam

    httpd = make_server(str(sa[0]), int(port), wsgi, Server, handler_class=_Quiet)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    return httpd, t
