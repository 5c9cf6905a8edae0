"""What local processes publish through the bridge's unix socket is logged as a
host client's record, not a device's: the real bridge, its telemetry log on
disk, and the real `edgebus pub` (a link client) and text mode on the socket."""

import asyncio
import os

from dev.harness.process import run_module
from edgebus import tlog
from edgebus.bridge import config as bridge_config
from edgebus.bridge.daemon import Bridge
from tests.conftest import until


def test_shell_publish_is_a_host_clients_record(tmp_path):
    path = tmp_path / "bridge.toml"
    path.write_text(
        '[bridge]\nnode = "gw"\nstate_dir = "state"\nsocket = "state/bridge.sock"\n'
        '[log]\ndir = "log"\npatterns = ["dev/#"]\n'
    )
    cfg = bridge_config.load(path)

    async def main():
        b = Bridge(cfg)
        t = asyncio.create_task(b.run())
        await until(lambda: os.path.exists(cfg.socket), 15)
        pub = await asyncio.to_thread(
            run_module,
            "edgebus.tools.cli",
            "pub",
            "--socket",
            cfg.socket,
            "dev/dev-a/cmd/led",
            "1",
            timeout=60,
        )
        r, w = await asyncio.open_unix_connection(cfg.socket)
        w.write(b"pub dev/dev-a/cmd/led 0\nquit\n")
        await w.drain()
        assert await asyncio.wait_for(r.readline(), 10) == b"ok\n"
        assert await asyncio.wait_for(r.readline(), 10) == b""  # the bridge closed it
        w.close()
        await until(lambda: b.appender.appended >= 2, 15)
        b.stop()
        await t
        return pub

    pub = asyncio.run(main())
    assert pub.returncode == 0, pub.stderr
    recs = [r for _, r in tlog.read_log(str(cfg.log_dir))]
    cmds = [r for r in recs if tuple(r["topic"]) == ("dev", "dev-a", "cmd", "led")]
    assert sorted(r["payload"] for r in cmds) == [0, 1]
    for r in cmds:
        # No device identity: the audit and the report's devices leave it out.
        assert (r["peer_node"], r["peer_sid"], r["seq"], r["generation"]) == (None,) * 4
        assert r["origin_kind"] == "socket"
        assert "'uid': %d" % os.getuid() in r["principal"]
    shell, text = (next(r for r in cmds if r["payload"] == v) for v in (1, 0))
    assert shell["link_id"].startswith("local:") and text["link_id"].startswith("text:")
    assert shell["extra"]["client"] == "cli"  # the name the shell gave itself
