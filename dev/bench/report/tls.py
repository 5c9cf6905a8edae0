"""Section 10: the heap TLS costs a device."""

from .formats import num
from .templates import fill


def tls_section(t):
    """Section 10: the heap TLS costs a device (dev/bench/tls_bench.py)."""
    if not t:
        return []

    def kb(r):
        return "%d KB" % r["smallest_heap_kb"] if r.get("smallest_heap_kb") else "not bisected"

    p, s = t["plain"], t["tls"]
    rows = [
        "| %s | %s | %s | %s |" % (name, num(r["ready_alloc"]), num(r["session_alloc"]), kb(r))
        for name, r in (("MQTT", p), ("MQTT over TLS", s))
    ]
    if p.get("smallest_heap_kb") and s.get("smallest_heap_kb"):
        more = "+%d KB" % (s["smallest_heap_kb"] - p["smallest_heap_kb"])
    else:
        more = "—"
    rows.append(
        "| TLS costs | {:+,} | {:+,} | {} |".format(
            s["ready_alloc"] - p["ready_alloc"], s["session_alloc"] - p["session_alloc"], more
        )
    )
    return fill("tls", certs=t["certs"], readings=t["readings"], rows="\n".join(rows))
