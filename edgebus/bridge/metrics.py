"""Prometheus /metrics for the bridge (prometheus-client), read at scrape time
from the same stats that `edgebus status` prints: the fleet's totals, and
per-link series for at most ``[bridge] metrics_links`` links (the ones in
trouble first), so that a scrape stays small and quick at any fleet size."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Iterator

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from edgebus.bridge import fleetpage
from edgebus.bridge.status import state
from edgebus.client.local import ERRORS

if TYPE_CHECKING:
    from edgebus.bridge.context import BridgeView, MailboxView
    from edgebus.link.link import Link

SCRAPE_WAIT = 10.0  # seconds a scrape waits for the event loop before it fails

# Link states as the metrics count them: a device asleep as it announced is
# no fault; one that overslept its wake by [mailbox] margin is.
STATES = ("up", "down", "hello_sent", "ack_sent", "asleep", "overslept")


def trouble(links: dict[str, Link], n: int, mailbox: MailboxView | None = None) -> list[str]:
    """The ids of at most ``n`` of ``links`` ({id: Link}) most worth a look:
    those without a session first (a device asleep is not one), then by
    errors and gaps; all of them when there are no more than ``n``."""
    if len(links) <= n:
        return sorted(links)

    def rank(kv: tuple[str, Link]) -> tuple[bool, int, str]:
        c = kv[1].counters
        ok = state(kv[1], mailbox) in ("up", "asleep")
        return (ok, -sum(c.get(k, 0) for k in ERRORS + ("gaps",)), kv[0])

    return sorted(k for k, _ in sorted(links.items(), key=rank)[:n])


class BridgeCollector:
    """Scrapes run on prometheus-client's thread; the stats are read on the
    bridge's event loop, where the links live (read from the scrape's thread,
    a link that closes in between is a KeyError or a dict that changed size)."""

    def __init__(self, bridge: BridgeView, per_link: int = 100) -> None:
        self.bridge = bridge
        self.per_link = per_link
        self.loop = asyncio.get_running_loop()

    async def _stats(self) -> dict[str, Any]:
        b = self.bridge
        return b.stats(trouble(b.links, self.per_link, b.mailbox))

    def collect(self) -> Iterator[Any]:
        st = asyncio.run_coroutine_threadsafe(self._stats(), self.loop).result(SCRAPE_WAIT)
        yield from _fleet(st["fleet"], st["mailbox"])
        yield from _links(st["links"])
        yield from _bus(st["bus"], st.get("mqtt"))
        lg = st.get("log")
        if lg:
            yield from _log(lg)
            yield from _log_health(lg)


def _fleet(f: dict[str, Any], mailbox: dict[str, Any]) -> Iterator[Any]:
    """The links by state, the mailbox's counters, the fleet's counters summed."""
    states = GaugeMetricFamily(
        "edgebus_links",
        "links by state (asleep: a device asleep as announced; overslept: past its wake)",
        labels=["state"],
    )
    for s in STATES:
        states.add_metric([s], f["states"].get(s, 0))
    yield states
    mb = CounterMetricFamily(
        "edgebus_mailbox_calls",
        "calls for devices asleep: held, delivered, no_endpoint, refused_full, expired, "
        "refused_not_asleep, denied (bridge/mailbox.py)",
        labels=["counter"],
    )
    for k, v in mailbox["counters"].items():
        mb.add_metric([k], v)
    yield mb
    fleet = CounterMetricFamily(
        "edgebus_fleet_events", "link counters summed over every link", labels=["counter"]
    )
    for k, v in sorted(f["counters"].items()):
        fleet.add_metric([k], v)
    yield fleet


def _links(links: dict[str, Any]) -> Iterator[Any]:
    """Per link (those the scrape reports): up, asleep, generation, counters,
    framing, spool."""
    up = GaugeMetricFamily(
        "edgebus_link_up", "1 when the link's session is up", labels=["link", "peer"]
    )
    asleep = GaugeMetricFamily(
        "edgebus_link_asleep",
        "1 while the link's device is asleep as it announced (not a fault; past its wake "
        "by [mailbox] margin it is 0: overslept)",
        labels=["link"],
    )
    gen = GaugeMetricFamily(
        "edgebus_link_generation", "the peer's generation", labels=["link", "peer"]
    )
    ev = CounterMetricFamily(
        "edgebus_link_events",
        "link counters (frames, gaps, errors...)",
        labels=["link", "counter"],
    )
    fr = CounterMetricFamily(
        "edgebus_link_frame_errors",
        "framing counters of the transport",
        labels=["link", "counter"],
    )
    sp = GaugeMetricFamily(
        "edgebus_link_spool_bytes",
        "bytes the link's spool holds for its peer (sent, not yet acknowledged, or waiting)",
        labels=["link"],
    )
    cap = GaugeMetricFamily(
        "edgebus_link_spool_capacity_bytes", "the size of the link's spool", labels=["link"]
    )
    for lid, s in links.items():
        peer = s.get("peer") or ""
        up.add_metric([lid, peer], 1 if s["state"] == "up" else 0)
        asleep.add_metric([lid], 1 if s["state"] == "asleep" else 0)
        if s.get("generation") is not None:
            gen.add_metric([lid, peer], s["generation"])
        for k, v in s["counters"].items():
            ev.add_metric([lid, k], v)
        for k, v in (s.get("transport") or {}).items():
            fr.add_metric([lid, k], v)
        if s.get("spool"):
            sp.add_metric([lid], s["spool"]["bytes"])
            cap.add_metric([lid], s["spool"]["capacity"])
    yield up
    yield asleep
    yield gen
    yield ev
    yield fr
    yield sp
    yield cap


def _bus(b: dict[str, Any], mq: dict[str, Any] | None) -> Iterator[Any]:
    """The host bus, the MQTT broker's connection and what the broker dropped."""
    yield GaugeMetricFamily(
        "edgebus_bus_connections", "connections on the host bus", value=b["connections"]
    )
    yield CounterMetricFamily(
        "edgebus_bus_dropped", "messages dropped by full feeds", value=b["dropped"]
    )
    yield CounterMetricFamily(
        "edgebus_bus_overflows",
        "feeds closed because they could not keep up (disconnect)",
        value=b.get("overflows", 0),
    )
    yield GaugeMetricFamily(
        "edgebus_bus_retained", "retained topics on the host bus", value=b["retained"]
    )
    if mq:
        yield GaugeMetricFamily(
            "edgebus_broker_connected",
            "1 while the bridge is connected to the MQTT broker ([mqtt] url)",
            value=1 if mq["connected"] else 0,
        )
        yield CounterMetricFamily(
            "edgebus_broker_connects", "connections made to the MQTT broker", value=mq["connects"]
        )
    if mq and mq.get("broker_dropped") is not None:
        yield CounterMetricFamily(
            "edgebus_broker_dropped",
            "messages the MQTT broker dropped (its queues full) since the bridge connected",
            value=mq["broker_dropped"],
        )


def _log(lg: dict[str, Any]) -> Iterator[Any]:
    """The telemetry log's counters, backlog and pushback."""
    yield CounterMetricFamily(
        "edgebus_log_appended", "records appended to the log", value=lg["appended"]
    )
    yield CounterMetricFamily(
        "edgebus_log_dropped", "records lost before the log", value=lg["dropped"]
    )
    yield CounterMetricFamily(
        "edgebus_log_syncs", "group commits (sync points) made", value=lg["syncs"]
    )
    yield CounterMetricFamily(
        "edgebus_log_sync_seconds",
        "the time the sync points took, summed (over edgebus_log_syncs_total: the mean)",
        value=lg.get("sync_seconds", 0.0),
    )
    yield GaugeMetricFamily(
        "edgebus_log_unsynced",
        "records appended since the last sync point",
        value=lg["unsynced"],
    )
    yield CounterMetricFamily(
        "edgebus_log_held",
        "data frames durable links held back while the log was "
        "behind (their devices send them again)",
        value=lg["held"],
    )
    yield GaugeMetricFamily(
        "edgebus_log_queued", "messages waiting for the log", value=lg["queued"]
    )
    yield GaugeMetricFamily(
        "edgebus_log_pushback",
        "1 while the log pushes back on durable links (behind, or failed)",
        value=1 if lg["state"] in ("pushing back", "failed") else 0,
    )


def _log_health(lg: dict[str, Any]) -> Iterator[Any]:
    """A failed log (a gauge, and its reason as an info series while it
    lasts), its failures, and its disk's free space against the warning's."""
    yield GaugeMetricFamily(
        "edgebus_log_failed",
        "1 while the log is failed (nothing acknowledged; it is reopened with backoff)",
        value=1 if lg["failed"] else 0,
    )
    if lg["failed"]:
        info = GaugeMetricFamily(
            "edgebus_log_failure_info", "why the log is failed", labels=["reason"]
        )
        info.add_metric([lg["failed"]], 1)
        yield info
    yield CounterMetricFamily(
        "edgebus_log_failures", "times the log failed (e.g. its disk full)", value=lg["failures"]
    )
    yield CounterMetricFamily(
        "edgebus_log_resumes", "times a failed log resumed", value=lg["resumed"]
    )
    if lg["free_bytes"] is not None:
        yield GaugeMetricFamily(
            "edgebus_log_free_bytes", "bytes free on the log's disk", value=lg["free_bytes"]
        )
    yield GaugeMetricFamily(
        "edgebus_log_min_free_bytes",
        "the log warns below this many bytes free ([log] min_free_bytes; 0: never)",
        value=lg["min_free_bytes"],
    )
    yield GaugeMetricFamily(
        "edgebus_log_low_space",
        "1 while the log's disk has less free than [log] min_free_bytes",
        value=1 if lg["free_bytes"] is not None and lg["free_bytes"] < lg["min_free_bytes"] else 0,
    )


def serve(bridge: BridgeView, addr: str) -> tuple[Any, Any]:
    """Start the HTTP server on addr ("host:port"): /metrics, and the fleet
    page beside it (/fleet, /fleet.json: fleetpage.py); returns (server, thread)."""
    reg = CollectorRegistry()
    reg.register(BridgeCollector(bridge, bridge.cfg.metrics_links))
    fleet = fleetpage.FleetPage(bridge)
    return fleetpage.start_server(addr, fleetpage.app(make_wsgi_app(reg), fleet.answer))
