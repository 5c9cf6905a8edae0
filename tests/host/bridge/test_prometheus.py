"""The bridge's /metrics as Prometheus runs it (docs/prometheus/): a real
scrape linted by ``promtool check metrics``; the alert rules checked and
unit-tested by promtool; and a real Prometheus scraping a real bridge with a
device (a CPython device over a real mosquitto, dev/swarm.py), loading the
rules (each one's expression evaluates) and answering every query of the
Grafana dashboard. promtool and prometheus come from Debian's ``prometheus``
package (``./do setup`` installs it); without them these tests are skipped."""

import asyncio
import json
import os
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request

import pytest

from dev.broker import Mosquitto, free_port
from dev.harness.bridge import BridgeProcess
from dev.harness.poll import wait_until
from dev.harness.process import ROOT, Process
from dev.swarm import Swarm
from edgebus.bridge import config as bridge_config
from edgebus.bridge.daemon import Bridge
from tests.conftest import until

pytestmark = pytest.mark.prometheus

KIT = os.path.join(ROOT, "docs", "prometheus")
RULES = os.path.join(KIT, "edgebus-rules.yml")
RULES_TEST = os.path.join(KIT, "edgebus-rules.test.yml")
DASHBOARD = os.path.join(KIT, "edgebus-dashboard.json")
JOB = "edgebus-bridge"  # the scrape job the rules expect (EdgebusBridgeDown)

PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus") or (
    "/usr/bin/prometheus" if os.path.exists("/usr/bin/prometheus") else None
)
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)"
)
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus not installed (apt-get install prometheus)"
)


def _promtool(*args, stdin=None):
    return subprocess.run(
        [PROMTOOL, *args], input=stdin, capture_output=True, text=True, timeout=60
    )


def _get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


@needs_promtool
def test_a_real_scrape_passes_promtool_check_metrics(tmp_path):
    """Every kind of series a bridge exports (a link per transport, the log,
    the broker's connection) is in one scrape, and promtool's linter
    (Prometheus's naming conventions) finds nothing in it."""
    port = free_port()
    path = tmp_path / "bridge.toml"
    path.write_text(
        '[bridge]\nstate_dir = "state"\nmetrics = "127.0.0.1:%d"\n'
        '[log]\ndir = "log"\n'
        '[mqtt]\nurl = "mqtt://127.0.0.1:%d"\ndevices = [{node = "d1", key = "k"}]\n'
        '[[serial]]\nnode = "s1"\nport = "%s/no-such-tty"\nkey = "k"\n'
        % (port, free_port(), tmp_path)
    )
    cfg = bridge_config.load(path)

    async def main():
        b = Bridge(cfg)
        t = asyncio.create_task(b.run())
        await until(
            lambda: (
                "serial:s1" in b.links and b.links["serial:s1"].counters.get("port_errors", 0) >= 1
            ),
            10,
        )
        body = await asyncio.to_thread(_get, "http://127.0.0.1:%d/metrics" % port)
        b.stop()
        await t
        return body

    text = asyncio.run(main())
    for name in (
        "edgebus_link_up",
        "edgebus_link_asleep",
        "edgebus_link_events_total",
        "edgebus_link_spool_bytes",
        "edgebus_link_spool_capacity_bytes",
        "edgebus_broker_connected",
        "edgebus_log_sync_seconds_total",
        "edgebus_log_failed",
    ):
        assert "\n%s{" % name in text or "\n%s " % name in text, name
    r = _promtool("check", "metrics", stdin=text)
    assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr


@needs_promtool
def test_the_alert_rules_pass_promtool_check_and_their_unit_tests():
    r = _promtool("check", "rules", RULES)
    assert r.returncode == 0, r.stdout + r.stderr
    r = _promtool("test", "rules", RULES_TEST)
    assert r.returncode == 0, r.stdout + r.stderr
    # Every rule has a unit test that fires it.
    with open(RULES) as f:
        rules = {line.split(":", 1)[1].strip() for line in f if line.strip().startswith("- alert:")}
    with open(RULES_TEST) as f:
        tested = f.read()
    assert rules and all("alertname: %s\n" % a in tested for a in rules), rules


# -- a real Prometheus ---------------------------------------------------------


class Stack:
    """mosquitto, a CPython device on it, the bridge (with /metrics and a
    log) and Prometheus scraping it every second with the rules loaded."""

    def __init__(self, work):
        self.work = work
        self.broker = Mosquitto()
        self.swarm = None
        self.bridge = None
        self.prom = None
        self.metrics = free_port()
        self.url = "http://127.0.0.1:%d" % free_port()

    def start(self):
        self.broker.__enter__()
        self.swarm = Swarm(
            1,
            ("127.0.0.1", self.broker.port),
            rate=5.0,
            workers=1,
            ramp=0,
            heartbeat=0.5,
            log=os.path.join(self.work, "swarm.log"),
        )
        self.node = self.swarm.nodes()[0]
        self.link = "mqtt:" + self.node
        toml = os.path.join(self.work, "bridge.toml")
        with open(toml, "w") as f:
            f.write(
                '[bridge]\nnode = "gw"\nstate_dir = "%s"\nsocket = "%s"\nheartbeat = 0.5\n'
                'metrics = "127.0.0.1:%d"\n[log]\ndir = "%s"\npatterns = ["dev/#"]\n\n%s'
                % (
                    os.path.join(self.work, "state"),
                    os.path.join(self.work, "bridge.sock"),
                    self.metrics,
                    os.path.join(self.work, "tlog"),
                    self.swarm.toml(),
                )
            )
        self.bridge = BridgeProcess(self.work, toml=toml).start().ready(60)
        self.swarm.start()
        prom_yml = os.path.join(self.work, "prometheus.yml")
        with open(prom_yml, "w") as f:
            f.write(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "rule_files: [%s]\n"
                "scrape_configs:\n  - job_name: %s\n    static_configs:\n"
                "      - targets: ['127.0.0.1:%d']\n" % (json.dumps(RULES), JOB, self.metrics)
            )
        self.promlog = os.path.join(self.work, "prometheus.log")
        with open(self.promlog, "ab") as log:
            self.prom = Process(
                [
                    PROMETHEUS,
                    "--config.file=" + prom_yml,
                    "--storage.tsdb.path=" + os.path.join(self.work, "tsdb"),
                    "--web.listen-address=" + self.url[len("http://") :],
                ],
                cwd=self.work,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_until(self._ready, 60, "prometheus ready (see %s)" % self.promlog, 0.2, [self.prom])
        return self

    def _ready(self):
        try:
            return "Ready" in _get(self.url + "/-/ready", 1)
        except OSError:
            return False

    def api(self, path, **params):
        """The JSON of Prometheus's HTTP API at /api/v1/<path>."""
        q = "?" + urllib.parse.urlencode(params) if params else ""
        try:
            return json.loads(_get(self.url + "/api/v1/" + path + q))
        except urllib.error.HTTPError as e:  # a bad query: its JSON says why
            return json.loads(e.read().decode())

    def query(self, expr):
        """The result of an instant query (a list of samples); AssertionError
        if Prometheus cannot evaluate it."""
        r = self.api("query", query=expr)
        assert r["status"] == "success", (expr, r)
        return r["data"]["result"]

    def wait_query(self, expr, cond=bool, timeout=60, what=None):
        last = [None]

        def ok():
            last[0] = self.query(expr)
            return cond(last[0])

        wait_until(
            ok,
            timeout,
            lambda: "%s (last: %s)" % (what or expr, last[0]),
            0.2,
            [self.prom, self.bridge.proc],
        )
        return last[0]

    def close(self):
        for part in (self.prom, self.swarm, self.bridge):
            if part is not None:
                part.close()
        self.broker.__exit__(None, None, None)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    if PROMETHEUS is None:
        pytest.skip("prometheus not installed (apt-get install prometheus)")
    s = Stack(str(tmp_path_factory.mktemp("prometheus")))
    try:
        s.start()
        # The device's session up, as Prometheus has scraped it.
        s.wait_query('edgebus_link_up{link="%s"} == 1' % s.link, what="the device up")
        yield s
    finally:
        s.close()


def _exprs(node):
    """Every "expr" in a dashboard's JSON (panels, rows' panels, variables)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "expr" and isinstance(v, str):
                yield v
            else:
                yield from _exprs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _exprs(v)


DASHBOARD_VARS = {
    "$__rate_interval": "1m",
    "${__rate_interval}": "1m",
    "$__interval": "15s",
    "$job": JOB,
    "${job}": JOB,
    "$instance": ".*",
    "${instance}": ".*",
}


def _as_prometheus_query(expr):
    """A dashboard's expr with Grafana's variables as Prometheus takes them."""
    for k in sorted(DASHBOARD_VARS, key=len, reverse=True):
        expr = expr.replace(k, DASHBOARD_VARS[k])
    assert "$" not in expr, expr
    return expr


# Panels that show faults only: empty while nothing is wrong.
FAULT_PANELS = {
    "Links down (not asleep)",
    "Refusals by kind",
    "Links with the most refusals (1 h, top 10)",
    "edgebus alerts firing or pending",
}


def _panels(dash):
    for p in dash["panels"]:
        yield p
        yield from p.get("panels", ())  # a collapsed row's


@pytest.mark.mosquitto
def test_every_dashboard_query_evaluates_on_a_real_prometheus(stack):
    with open(DASHBOARD) as f:
        dash = json.load(f)
    assert len(list(_exprs(dash))) >= 10
    # Readings flowing in: enough for the rates to have two points.
    stack.wait_query(
        'rate(edgebus_link_events_total{counter="imported",link="%s"}[1m]) > 0' % stack.link,
        what="the device's readings/s",
    )
    empty = []
    for p in _panels(dash):
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == "${DS_PROMETHEUS}", p["title"]
        exprs = list(_exprs(p["targets"]))
        assert exprs, p["title"]
        # Every query evaluates; a panel but those about faults has data.
        if not any([stack.query(_as_prometheus_query(e)) for e in exprs]):
            empty.append(p["title"])
    assert set(empty) <= FAULT_PANELS, empty


@pytest.mark.mosquitto
def test_prometheus_scrapes_the_bridge_and_its_rules_evaluate(stack):
    link = stack.link
    assert stack.query("edgebus_broker_connected == 1")
    assert stack.query('up{job="%s"} == 1' % JOB)
    assert stack.wait_query("increase(edgebus_log_syncs_total[30s]) > 0", what="log commits")

    def rules_ok(_):
        groups = stack.api("rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        bad = [(r["name"], r["health"], r.get("lastError")) for r in rules if r["health"] != "ok"]
        return rules and not bad, bad

    wait_until(lambda: rules_ok(None)[0], 30, lambda: "rules healthy: %s" % (rules_ok(None)[1],))
    assert not stack.query('ALERTS{alertname="EdgebusDeviceDown"}')

    # The device stops: its link goes down and EdgebusDeviceDown is pending
    # (it fires after 5 minutes: its unit test, edgebus-rules.test.yml, shows that).
    stack.swarm.close()
    stack.wait_query('edgebus_link_up{link="%s"} == 0' % link, timeout=60, what="the link down")
    alerts = stack.wait_query(
        'ALERTS{alertname="EdgebusDeviceDown",alertstate="pending"}',
        timeout=30,
        what="EdgebusDeviceDown pending",
    )
    assert [a["metric"]["link"] for a in alerts] == [link]
    # The bridge's own connection to the broker is not the device's.
    assert stack.query("edgebus_broker_connected == 1")
