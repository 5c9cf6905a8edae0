"""The live fleet page beside /metrics (bridge/fleetpage.py, bridge/fleet.html):
/fleet.json's paging, filter and sort over a bridge's real links and retained
sys/info and sys/ota; the workers' pages merged as the supervisor merges them;
no listener at all without [bridge] metrics; and a real bridge process with
devices over a real mosquitto, its /fleet loaded in real headless Chromium
(Debian's ``chromium``: ``./do setup`` installs it), checked after its script ran."""

import asyncio
import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request

import pytest

from dev.broker import Mosquitto, free_port
from dev.harness.bridge import BridgeProcess
from dev.harness.poll import wait_until
from dev.swarm import Swarm
from edgebus.bridge import config as bridge_config
from edgebus.bridge import fleetpage, split
from edgebus.bridge.daemon import Bridge
from edgebus.tools.sim.fleet import bridge_toml
from tests.conftest import until

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def _header(port, name):
    with urllib.request.urlopen("http://127.0.0.1:%d/fleet" % port, timeout=10) as r:
        return r.headers[name]


def _json(port, qs=""):
    return json.loads(_get("http://127.0.0.1:%d/fleet.json?%s" % (port, qs)))


def _cfg(tmp_path, nodes, metrics=True):
    """An in-process bridge for MQTT devices ``nodes`` on a broker that is not
    there (every link down), with [bridge] metrics on a free port (or none)."""
    port = free_port()
    b = {"state_dir": str(tmp_path / "state"), "node": "gw"}
    if metrics:
        b["metrics"] = "127.0.0.1:%d" % port
    cfg = bridge_config.parse(
        {
            "bridge": b,
            "mqtt": {
                "url": "mqtt://127.0.0.1:%d" % free_port(),
                "devices": [{"node": n, "key": "k"} for n in nodes],
            },
        }
    )
    bridge_config.prepare(cfg)
    return cfg, port


def _listening():
    """The TCP ports this process listens on (from /proc: its sockets' inodes)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            t = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if t.startswith("socket:["):
            inodes.add(t[8:-1])
    ports = set()
    for name in ("tcp", "tcp6"):
        with open("/proc/self/net/" + name) as f:
            for line in f.readlines()[1:]:
                p = line.split()
                if p[3] == "0A" and p[9] in inodes:  # LISTEN
                    ports.add(int(p[1].rsplit(":", 1)[1], 16))
    return ports


# A device's sys/health report (firmware/services/health.py), cut short.
HEALTH = {
    "uptime": 99,
    "mem_alloc": 90000,
    "mem_free": 12000,
    "service_errors": 0,
    "health_skipped": 0,
    "link": {
        "state": "up",
        "sid": 7,
        "memory_errors": 2,
        "spool": {"bytes": 2048, "capacity": 32768},
    },
    "uplink": {"opens": 1, "transport": {"oversize": 1, "frames": 5, "evil": 3, "silent": True}},
}


def _dress(b):
    """What devices would retain: sys/info and sys/ota for d000-d009 (d003 on
    trial, d004's last update failed), a sleep announced by d100; and refusals
    counted on d005's link."""
    for i in range(10):
        n = "d%03d" % i
        b.conn.retain(
            "dev/%s/sys/info" % n,
            {
                "fw": "0.1.0",
                "board": "unix",
                "uptime": 60 + i,
                "mem_free": 40960,
                "reset_cause": None,
            },
        )
        b.conn.retain(
            "dev/%s/sys/ota" % n,
            {
                "state": "trial" if i == 3 else "committed",
                "running": {"version": "1.%d" % i, "hash": "f" * 64, "slot": "a"},
                "trial": {"version": "1.3"} if i == 3 else None,
                "last_failure": {"version": "1.9", "reason": "no session"} if i == 4 else None,
                "rollbacks": 0,
            },
        )
    b.conn.retain("dev/d100/sys/sleep", {"ms": 600000})
    b.links["mqtt:d005"].count("forged", 3)
    b.links["mqtt:d005"].count("replayed", 1)


def test_fleet_json_pages_filters_and_sorts_a_bridge_of_real_links(tmp_path):
    nodes = ["d%03d" % i for i in range(120)]
    cfg, port = _cfg(tmp_path, nodes)

    async def main():
        b = Bridge(cfg)
        t = asyncio.create_task(b.run())
        try:
            await until(lambda: len(b.links) == 120 and hasattr(b, "metrics"), 10)
            _dress(b)
            await until(lambda: b.mailbox.sleep_of("d100") is not None, 10)
            ports = _listening()
            # d001's sys/health, as its link would publish it on the host bus:
            # kept (a summary), so its health and its own spool are its word.
            b.conn.publish("dev/d001/sys/health", HEALTH)
            health = None
            for _ in range(100):
                (health,) = [
                    r["health"]
                    for r in (await asyncio.to_thread(_json, port, "q=d001"))["rows"]
                    if r["id"] == "mqtt:d001"
                ]
                if health.get("at"):
                    break
                await asyncio.sleep(0.05)
            got = {}
            for qs in (
                "",
                "page=2",
                "q=D01",
                "state=asleep",
                "sort=-refused&per=2",
                "sort=-bundle&per=11",
                "q=trial",
            ):
                got[qs] = await asyncio.to_thread(_json, port, qs)
            page = await asyncio.to_thread(_get, "http://127.0.0.1:%d/fleet" % port)
            csp = await asyncio.to_thread(_header, port, "Content-Security-Policy")
            metrics = await asyncio.to_thread(_get, "http://127.0.0.1:%d/metrics" % port)
            errors = {}
            for how in ("fleet.json?sort=nope", "fleet.json?per=x", "POST fleet.json"):
                path = how.split()[-1]
                data = b"" if how.startswith("POST") else None
                try:
                    await asyncio.to_thread(
                        urllib.request.urlopen, "http://127.0.0.1:%d/%s" % (port, path), data
                    )
                except urllib.error.HTTPError as e:
                    errors[how] = e.code
            return ports, got, page, metrics, errors, health, csp
        finally:
            b.stop()
            await t

    ports, got, page, metrics, errors, health, csp = asyncio.run(main())
    # Text from devices is shown as text; the policy keeps even a slip local.
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp, csp
    assert health["at"] and health["mem_free"] == 12000 and health["uptime"] == 99, health
    assert health["dev_spool"] == [2048, 32768] and health["memory_errors"] == 2, health
    assert health["reset_cause"] is None and health["fw"] == "0.1.0"  # sys/info's beside it
    assert "sid" not in health and "link" not in health  # a summary, not the report
    assert health["transport"] == {"oversize": 1}  # refusals only, counts only
    assert port in ports
    first = got[""]
    assert (first["total"], first["matched"], first["pages"], first["per"]) == (120, 120, 3, 50)
    assert first["states"] == {"down": 119, "asleep": 1}
    assert [r["id"] for r in first["rows"]] == ["mqtt:d%03d" % i for i in range(50)]
    assert first["bridge"] == "gw" and first["worker"] is None
    d0 = first["rows"][0]
    assert d0["health"]["mem_free"] == 40960 and d0["bundle"]["version"] == "1.0"
    assert d0["ota"]["state"] == "committed" and d0["spool"][1] > 0
    assert first["rows"][50 - 1]["health"] is None  # d049: no sys/info
    assert [r["id"] for r in got["page=2"]["rows"]] == ["mqtt:d%03d" % i for i in range(100, 120)]
    assert [r["id"] for r in got["q=D01"]["rows"]] == ["mqtt:d%03d" % i for i in range(10, 20)]
    (sleeper,) = got["state=asleep"]["rows"]
    assert sleeper["id"] == "mqtt:d100" and sleeper["until"] > first["generated"] + 500
    top = got["sort=-refused&per=2"]["rows"][0]
    assert (top["id"], top["forged"], top["replayed"]) == ("mqtt:d005", 3, 1)
    by_bundle = got["sort=-bundle&per=11"]["rows"]
    assert [r["bundle"]["version"] for r in by_bundle[:10]] == [
        "1.%d" % i for i in range(9, -1, -1)
    ]
    assert by_bundle[10]["bundle"] is None  # no bundle known: last either way
    assert [r["id"] for r in got["q=trial"]["rows"]] == ["mqtt:d003"]
    assert got["q=trial"]["rows"][0]["ota"]["trial"] == "1.3"
    assert "<title>edgebus fleet</title>" in page and "fleet.json" in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing from elsewhere
    assert 'edgebus_links{state="down"} 119.0' in metrics
    assert errors == {"fleet.json?sort=nope": 400, "fleet.json?per=x": 400, "POST fleet.json": 405}


def test_without_metrics_the_bridge_listens_on_no_tcp_port(tmp_path):
    """The page has /metrics' access rules: off unless [bridge] metrics is set."""
    cfg, port = _cfg(tmp_path, ["d1"], metrics=False)
    before = _listening()

    async def main():
        b = Bridge(cfg)
        t = asyncio.create_task(b.run())
        try:
            await until(lambda: "mqtt:d1" in b.links, 10)
            await asyncio.sleep(0.2)
            return _listening(), getattr(b, "metrics", None)
        finally:
            b.stop()
            await t

    during, server = asyncio.run(main())
    assert server is None and during - before == set()
    with pytest.raises(urllib.error.URLError):
        _get("http://127.0.0.1:%d/fleet" % port, 2)


def test_the_supervisor_merges_the_workers_pages(tmp_path):
    """fleetpage.merged (the supervisor's /fleet.json under --workers) over two
    bridges' listeners, one of them gone: rows sorted and paged over both."""
    cfg_a, port_a = _cfg(tmp_path / "a", ["a%02d" % i for i in range(30)])
    cfg_b, port_b = _cfg(tmp_path / "b", ["b%02d" % i for i in range(30)])
    gone = free_port()

    async def main():
        bs = [Bridge(cfg_a), Bridge(cfg_b)]
        ts = [asyncio.create_task(b.run()) for b in bs]
        try:
            await until(lambda: all(len(b.links) == 30 and hasattr(b, "metrics") for b in bs), 10)
            bs[1].links["mqtt:b07"].count("forged", 2)
            ports = [port_a, port_b, gone]
            return [
                await asyncio.to_thread(fleetpage.merged, ports, qs, "gw", 5)
                for qs in ("per=25&page=1", "sort=-refused&per=3", "q=b1", "per=1&page=45")
            ]
        finally:
            for b in bs:
                b.stop()
            await asyncio.gather(*ts)

    paged, refused, found, deep = asyncio.run(main())
    assert (paged["total"], paged["matched"], paged["pages"]) == (60, 60, 3)
    assert paged["states"] == {"down": 60} and paged["workers"] == [True, True, False]
    ids = [r["id"] for r in paged["rows"]]
    assert ids == ["mqtt:a%02d" % i for i in range(25, 30)] + ["mqtt:b%02d" % i for i in range(20)]
    assert {r["worker"] for r in paged["rows"]} == {0, 1}
    assert refused["rows"][0]["id"] == "mqtt:b07" and refused["rows"][0]["worker"] == 1
    assert [r["id"] for r in found["rows"]] == ["mqtt:b%02d" % i for i in range(10, 20)]
    assert [r["id"] for r in deep["rows"]] == ["mqtt:b15"] and deep["pages"] == 60


def test_a_bridge_of_two_workers_serves_one_fleet_page(tmp_path):
    """edgebus-bridge --workers 2 (real processes): the supervisor's /fleet.json
    has every device, each row from the worker that holds it."""
    port = free_port()
    nodes = ["n%02d" % i for i in range(12)]
    toml = tmp_path / "bridge.toml"
    toml.write_text(
        '[bridge]\nnode = "gw"\nworkers = 2\nstate_dir = "%s"\nsocket = "%s"\n'
        'metrics = "127.0.0.1:%d"\n[mqtt]\nurl = "mqtt://127.0.0.1:%d"\ndevices = [\n%s]\n'
        % (
            tmp_path / "state",
            tmp_path / "bridge.sock",
            port,
            free_port(),
            "".join('  {node = "%s", key = "k"},\n' % n for n in nodes),
        )
    )
    bridge = BridgeProcess(str(tmp_path), toml=toml).start().ready(60)
    try:

        def whole():
            try:
                d = _json(port, "per=20")
            except OSError:
                return None
            return d if d["workers"] == [True, True] and d["total"] == 12 else None

        d = wait_until(
            whole, 60, "both workers' rows (see %s)" % bridge.logpath, 0.2, [bridge.proc]
        )
    finally:
        bridge.close()
    assert [r["id"] for r in d["rows"]] == ["mqtt:" + n for n in nodes]
    assert all(r["worker"] == split.worker_of(r["node"], 2) for r in d["rows"])
    assert {r["worker"] for r in d["rows"]} == {0, 1}


# -- a real bridge, real devices, a real browser ------------------------------------------


def _chromium(url, work):
    """The DOM of ``url`` once its script ran (5 s of the page's virtual time)."""
    r = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--user-data-dir=" + str(work),
            "--virtual-time-budget=5000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def _shown(dom):
    """{device: state} of the rows the page's script made."""
    return dict(re.findall(r'<tr data-id="([^"]+)" data-state="([^"]+)">', dom))


@pytest.mark.mosquitto
@pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed (apt-get install chromium; ./do setup)"
)
def test_a_real_browser_shows_a_real_bridges_devices(tmp_path):
    """Two simulated devices up over mosquitto and one configured that never
    connects: headless Chromium shows each device's row with its state, and
    the filter in the page's address (#q=) leaves one."""
    port = free_port()
    with Mosquitto() as broker:
        swarm = Swarm(
            2,
            ("127.0.0.1", broker.port),
            rate=5.0,
            workers=1,
            ramp=0,
            heartbeat=0.5,
            log=str(tmp_path / "swarm.log"),
        )
        devices = swarm.bridge_config()
        devices["mqtt"]["devices"].append({"node": "absent-1", "key": "k"})
        toml = tmp_path / "bridge.toml"
        toml.write_text(
            '[bridge]\nnode = "gw"\nstate_dir = "%s"\nsocket = "%s"\nheartbeat = 0.5\n'
            'metrics = "127.0.0.1:%d"\n\n%s'
            % (tmp_path / "state", tmp_path / "bridge.sock", port, bridge_toml(devices))
        )
        bridge = BridgeProcess(str(tmp_path), toml=toml).start().ready(60)
        try:
            swarm.start()
            wait_until(
                lambda: _json(port, "state=up")["matched"] == 2,
                60,
                "both devices up (see %s)" % bridge.logpath,
                0.2,
                [bridge.proc],
            )

            # Readings/s: over the requests' interval, once there are two.
            def rates():
                rs = [r["rate"] for r in _json(port, "state=up")["rows"]]
                return rs if all(rs) else None

            rates = wait_until(rates, 30, "readings/s for both devices", 0.5)
            url = "http://127.0.0.1:%d/fleet" % port
            dom = _chromium(url, tmp_path / "chromium")
            one = _chromium(url + "#q=absent", tmp_path / "chromium")
        finally:
            swarm.close()
            bridge.close()
    a, b = swarm.nodes()
    assert all(r > 0 for r in rates), rates
    assert 'data-loaded="1"' in dom
    assert _shown(dom) == {"mqtt:" + a: "up", "mqtt:" + b: "up", "mqtt:absent-1": "down"}
    assert "3 devices:" in dom and "2 up" in dom and "1 down" in dom
    assert "page 1 of 1 (3 matching)" in dom
    assert _shown(one) == {"mqtt:absent-1": "down"}
