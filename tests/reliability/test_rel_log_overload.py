"""The bridge's log under overload: a log slower than its devices
(a sync that sleeps, a queue of a few dozen messages) under a burst. What a
durable link acknowledges is always in the log: the link pushes back while
the log is behind (the device keeps its readings spooled and sends them
again), and a record the log cannot encode is refused to its device, never
acknowledged as if written. Real Links over in-process pipes (real frames),
a real bus, the bridge's real Appender and LogWriter on a temporary disk."""

import asyncio
import time
import uuid

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import edgebus
from edgebus import tlog
from edgebus.bridge import config as bridge_config
from edgebus.bridge.telemetry.appender import Appender
from edgebus.link.link import Link
from edgebus.link.pipe import pair
from tests.portable.linkkit import until

KEY = b"k"
HB = 0.4  # link timers tick every 0.1 s: a held link asks again soon


def _appender(host, log_dir, queue_len, sync_s, patterns=("dev/#",)):
    cfg = bridge_config.parse(
        {
            "log": {
                "dir": log_dir,
                "patterns": list(patterns),
                "commit_ms": 5,
                "segment_seconds": 3600,
            }
        }
    )
    a = Appender(host, cfg, queue_len=queue_len)
    flush = a.writer.flush

    def slow_flush():  # a slow disk: every sync point takes sync_s
        time.sleep(sync_s)
        return flush()

    a.writer.flush = slow_flush
    return a


class Fleet:
    """n devices, each a bus and an initiator Link, joined to the host bus of
    the appender by a durable responder Link whose hold is the appender's."""

    def __init__(self, host, a, n):
        self.devs = []
        self.tasks = []
        for i in range(n):
            node = "d%d" % i
            bus = edgebus.Bus()
            dl = Link(
                bus,
                node,
                key=KEY,
                role="initiator",
                exports=[("sensor/#", "")],
                heartbeat=HB,
                spool=65536,
                out_queue=256,
                status=False,
            )
            hl = Link(
                host,
                "gw",
                key=KEY,
                role="responder",
                link_id="test:" + node,
                peer=node,
                imports=[("#", "dev/{node}")],
                heartbeat=HB,
                durable=True,
                status=False,
            )
            hl.hold = a.hold  # as the bridge wires its durable links
            a.links[hl.link_id] = hl
            self.devs.append((node, bus.connect(), dl, hl))

    def spool(self):
        """Devices number and spool their readings from now on."""
        for _, _, dl, _ in self.devs:
            dl.start()

    def start(self):
        for _, _, dl, hl in self.devs:
            ta, tb = pair()
            self.tasks += [asyncio.create_task(dl.run(ta)), asyncio.create_task(hl.run(tb))]

    async def stop(self):
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def _logged(log_dir):
    """(link_id, peer_sid) -> the sequence numbers in the log."""
    out = {}
    for _, r in tlog.read_log(log_dir):
        out.setdefault((r["link_id"], r["peer_sid"]), []).append(r["seq"])
    return out


async def _scenario(log_dir, n_dev, burst, queue_len, sync_s, bad=(), seen=None, windows=True):
    """windows=False: the appender gives no windows, as to devices without
    the flow capability (docs/protocol.md 11): only its hold paces them."""
    host = edgebus.Bus()
    a = _appender(host, log_dir, queue_len, sync_s)
    if not windows:
        a.flow.pace = lambda sweep=False: None
    fleet = Fleet(host, a, n_dev)
    fleet.spool()
    task = asyncio.create_task(a.run())
    # Half the burst waits in the spools (an outage), half comes live.
    for _, c, _, _ in fleet.devs:
        for k in range(burst // 2):
            c.publish("sensor/t", {"k": k})
    fleet.start()
    for _, c, _, _ in fleet.devs:
        for k in range(burst // 2, burst):
            c.publish("sensor/t", {"k": float("nan")} if k in bad else {"k": k})

    def done():
        if seen is not None:
            seen.add(a.stats()["state"])
        return all(dl.counters.get("acked", 0) >= burst for _, _, dl, _ in fleet.devs)

    try:
        await until(done, timeout=60)
    except AssertionError:
        pass  # judged below, against the log
    await fleet.stop()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    st = a.stats()
    a.close()
    return fleet, st


def _check(log_dir, fleet, burst, bad=()):
    """For every device: acknowledged ⊆ logged, and every reading logged or
    still in its spool; refused ones refused to the device, once each."""
    logged = _logged(log_dir)
    for node, _, dl, hl in fleet.devs:
        got = set(logged.get((hl.link_id, dl.sid), ()))
        acked = dl.counters.get("acked", 0)  # the spool frees entries 1..acked
        sent = dl.tx_seq - 1
        assert sent == burst and not dl.counters.get("dropped_out"), dl.counters
        refused = {k + 1 for k in bad}
        missing = set(range(1, acked + 1)) - got - refused
        assert not missing, "%s: %d acknowledged readings not in the log: %s" % (
            node,
            len(missing),
            sorted(missing)[:10],
        )
        sp = dl.spool_stats()
        assert sp["evicted"] == 0 and sp["depth"] == sent - acked, (node, sp, acked)
        assert not got & refused
        assert dl.counters.get("refused_by_peer", 0) == len(bad), dl.counters


@pytest.mark.parametrize("windows", [True, False])
@settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    phases=(Phase.generate,),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    n_dev=st.integers(2, 5),
    burst=st.integers(20, 120),
    queue_len=st.integers(8, 48),
    sync_ms=st.integers(5, 40),
)
def test_acknowledged_readings_are_logged_under_a_burst_on_a_slow_log(
    tmp_path, n_dev, burst, queue_len, sync_ms, windows
):
    log_dir = str(tmp_path / uuid.uuid4().hex)
    seen = set()
    fleet, st = asyncio.run(
        _scenario(log_dir, n_dev, burst, queue_len, sync_ms / 1000, seen=seen, windows=windows)
    )
    _check(log_dir, fleet, burst)
    assert st["dropped"] == 0, st
    if windows:
        # Paced by their windows, the devices never sent what the log had no
        # room for: nothing held back, nothing sent twice.
        assert st["held"] == 0, st
        assert all(dl.counters.get("retransmitted", 0) == 0 for _, _, dl, _ in fleet.devs)
    else:
        # The burst was more than the log's queue: the links pushed back and
        # the devices delivered everything once the log had room.
        assert st["held"] > 0 and "pushing back" in seen, (st, seen)
    for _, _, dl, _ in fleet.devs:
        assert dl.counters.get("acked", 0) == burst, dl.counters


def test_a_record_the_log_cannot_write_is_refused_to_its_device(tmp_path):
    """A reading the log cannot hold (a NaN: JSON on the wire carries it, the
    log refuses non-finite numbers) is
    never acknowledged as written: its device is told why (REFUSE, counted
    and in its last_error) before the acknowledgement that passes it, and
    every other reading is logged."""
    log_dir = str(tmp_path / "log")
    bad = (8,)  # in the live half
    fleet, st = asyncio.run(_scenario(log_dir, 1, 12, 64, 0.001, bad=bad))
    _check(log_dir, fleet, 12, bad=bad)
    dl = fleet.devs[0][2]
    assert "not logged" in (dl.last_error or ""), dl.last_error
    assert st["errors"] == 1 and dl.counters.get("acked") == 12


def test_the_operator_is_told_when_the_log_pushes_back(tmp_path, caplog):
    """The bridge's log says so (rate-limited) and `edgebus status` shows it."""
    from edgebus.tools.commands.status import render

    caplog.set_level("WARNING", "edgebus.bridge")
    fleet, st = asyncio.run(_scenario(str(tmp_path / "log"), 2, 60, 8, 0.01, windows=False))
    warnings = [r.getMessage() for r in caplog.records if "the log is behind" in r.getMessage()]
    assert len(warnings) == 1 and "held back" in warnings[0], warnings  # once per 10 s
    text = render(
        {
            "node": "gw",
            "uptime": 1,
            "bus": {"connections": 1, "retained": 0, "dropped": 0},
            "log": st,
            "links": {},
        }
    )
    assert "log health: " in text and "%d data frames held back" % st["held"] in text, text


def test_readings_the_log_does_not_take_are_acknowledged_too(tmp_path):
    """A commit reads the marks of the links that delivered a logged record;
    a durable link whose readings the log's patterns do not take (its mark
    moves without a record) is acknowledged by the sweep over every link
    (once a second), also while another device keeps the log busy."""

    async def main():
        host = edgebus.Bus()
        a = _appender(host, str(tmp_path / "log"), 256, 0.001, patterns=("dev/d0/#",))
        fleet = Fleet(host, a, 2)
        task = asyncio.create_task(a.run())
        fleet.spool()
        fleet.start()
        for _, c, _, _ in fleet.devs:
            for k in range(30):
                c.publish("sensor/t", {"k": k})
        c0 = fleet.devs[0][1]

        async def busy():  # d0's readings keep the log busy all along
            k = 30
            while True:
                c0.publish("sensor/t", {"k": k})
                k += 1
                await asyncio.sleep(0.002)

        load = asyncio.create_task(busy())
        try:
            await until(lambda: fleet.devs[1][2].counters.get("acked", 0) == 30, timeout=30)
        finally:
            load.cancel()
            await fleet.stop()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            a.close()
        return fleet

    fleet = asyncio.run(main())
    logged = _logged(str(tmp_path / "log"))
    d0, d1 = fleet.devs[0], fleet.devs[1]
    got = sorted(logged[(d0[3].link_id, d0[2].sid)])
    assert got[:30] == list(range(1, 31)) and got == list(range(1, len(got) + 1))
    assert (d1[3].link_id, d1[2].sid) not in logged, logged.keys()
