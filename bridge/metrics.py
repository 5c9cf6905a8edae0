"""Prometheus /metrics for the bridge (prometheus-client), read at scrape time
from the same stats that `edgebus status` prints."""
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


class BridgeCollector:
    def __init__(self, bridge):
        self.bridge = bridge

    def collect(self):
        st = self.bridge.stats()
        up = GaugeMetricFamily("edgebus_link_up", "1 when the link's session is up",
                               labels=["link", "peer"])
        gen = GaugeMetricFamily("edgebus_link_generation", "the peer's generation",
                                labels=["link", "peer"])
        ev = CounterMetricFamily("edgebus_link_events", "link counters (frames, gaps, errors...)",
                                 labels=["link", "counter"])
        fr = CounterMetricFamily("edgebus_link_frame_errors", "framing counters of the transport",
                                 labels=["link", "counter"])
        for lid, s in st["links"].items():
            peer = s.get("peer") or ""
            up.add_metric([lid, peer], 1 if s["state"] == "up" else 0)
            if s.get("generation") is not None:
                gen.add_metric([lid, peer], s["generation"])
            for k, v in s["counters"].items():
                ev.add_metric([lid, k], v)
            for k, v in (s.get("transport") or {}).items():
                fr.add_metric([lid, k], v)
        yield up
        yield gen
        yield ev
        yield fr
        b = st["bus"]
        yield GaugeMetricFamily("edgebus_bus_connections", "connections on the host bus",
                                value=b["connections"])
        yield CounterMetricFamily("edgebus_bus_dropped", "messages dropped by full feeds",
                                  value=b["dropped"])
        yield CounterMetricFamily("edgebus_bus_overflows",
                                  "feeds closed because they could not keep up (disconnect)",
                                  value=b.get("overflows", 0))
        yield GaugeMetricFamily("edgebus_bus_retained", "retained topics on the host bus",
                                value=b["retained"])
        lg = st.get("log")
        if lg:
            yield CounterMetricFamily("edgebus_log_appended", "records appended to the log",
                                      value=lg["appended"])
            yield CounterMetricFamily("edgebus_log_dropped", "records lost before the log",
                                      value=lg["dropped"])
            yield CounterMetricFamily("edgebus_log_syncs", "group commits (sync points) made",
                                      value=lg["syncs"])
            yield GaugeMetricFamily("edgebus_log_unsynced",
                                    "records appended since the last sync point",
                                    value=lg["unsynced"])
            yield CounterMetricFamily("edgebus_log_held",
                                      "data frames durable links held back while the log was "
                                      "behind (their devices send them again)", value=lg["held"])
            yield GaugeMetricFamily("edgebus_log_queued", "messages waiting for the log",
                                    value=lg["queued"])
            yield GaugeMetricFamily("edgebus_log_pushback",
                                    "1 while the log pushes back on durable links",
                                    value=1 if lg["state"] == "pushing back" else 0)


def serve(bridge, addr):
    """Start the /metrics HTTP server on addr ("host:port"); returns (server, thread)."""
    host, _, port = addr.rpartition(":")
    reg = CollectorRegistry()
    reg.register(BridgeCollector(bridge))
    return start_http_server(int(port), addr=host, registry=reg)
