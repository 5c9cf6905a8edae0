"""Bad device input reaching the bridge's own consumers: the
telemetry log and the MQTT mirror refuse what they cannot hold, count it,
and keep going."""

import asyncio
import json

import pytest

import edgebus
from tests.portable.linkkit import until


def deep(n):
    return b"[" * n + b"]" * n


def test_deep_payload_does_not_stop_the_telemetry_log(tmp_path):
    """Regression: a device payload nested a few hundred deep (it fits in a
    1 KB frame) made the log writer's encoder raise RecursionError, which
    escaped the appender and ended its task: the bridge silently stopped
    logging for every device. Now the record is refused (counted in the
    appender's errors) and logging goes on."""
    from edgebus import tlog
    from edgebus.bridge import config as bridge_config
    from edgebus.bridge.telemetry.appender import Appender

    cfg = bridge_config.parse({"log": {"dir": str(tmp_path / "log"), "patterns": ["dev/#"]}})
    bus = edgebus.Bus()

    async def main():
        a = Appender(bus, cfg)
        task = asyncio.create_task(a.run())
        c = bus.connect()
        c.publish("dev/d/sensor/a", 1)
        c.publish("dev/d/sensor/deep", json.loads(deep(500)))
        c.publish("dev/d/sensor/b", 2)
        await until(lambda: a.appended == 2 and a.errors == 1)
        assert not task.done()
        c.publish("dev/d/sensor/c", 3)
        await until(lambda: a.appended == 3)
        task.cancel()
        a.close()

    asyncio.run(main())
    recs = [r["topic"][-1] for _, r in tlog.read_log(str(tmp_path / "log"))]
    assert recs == ["a", "b", "c"]
    with pytest.raises(ValueError, match="nests too deeply"):
        tlog.LogWriter(str(tmp_path / "log2")).append(
            tlog.record_from_message(_msg(json.loads(deep(900))))
        )
    assert tlog.list_segments(str(tmp_path / "log2")) == []


def _msg(payload):
    bus = edgebus.Bus()
    s = bus.connect().subscribe("dev/x", queue_len=1)
    bus.connect().publish("dev/x", payload)
    return s.recv_nowait()
