"""edgebus-bridge as its own process, for the tests and the dev tools."""

import asyncio
import json
import os
import signal
import subprocess

from dev.harness.poll import wait_until
from dev.harness.process import ROOT, Process, env, python
from edgebus.bridge import config, split
from edgebus.tools.commands.status import fetch


def mqtt_config(state_dir, broker_port, devices, bridge=None, **mqtt):
    """An in-process bridge's configuration (a bridge.config.Config) for MQTT
    devices {node: key} on the broker at the loopback broker_port: its state
    in state_dir, a 0.5 s heartbeat, and the [bridge] keys in bridge and the
    [mqtt] keys in mqtt (client_id, mirror...) besides."""
    return config.parse(
        {
            "bridge": dict({"state_dir": str(state_dir), "heartbeat": 0.5}, **(bridge or {})),
            "mqtt": dict(
                url="mqtt://127.0.0.1:%d" % broker_port,
                devices=[{"node": n, "key": k} for n, k in devices.items()],
                **mqtt,
            ),
        }
    )


def daemon_module(tree):
    """The daemon's module in checkout ``tree``: edgebus.bridge.daemon, or
    bridge.daemon in a tree from before the one installed name (a baseline
    the benchmarks measure beside this one)."""
    if os.path.exists(os.path.join(tree, "edgebus", "bridge")):
        return "edgebus.bridge.daemon"
    return "bridge.daemon"


class BridgeProcess:
    """edgebus-bridge as its own process (``python -m edgebus.bridge.daemon``) from a
    checkout ``tree``, for MQTT devices {node: key}, with a status socket;
    or, given ``toml``, run with that configuration as it is (its status
    socket, if it names one, is the one ``ready()`` waits for). Its output
    goes to ``logpath`` in workdir (``log()`` reads it); ``cwd`` is where it
    runs (the tree by default)."""

    def __init__(
        self,
        workdir,
        broker_port=None,
        devices=None,
        tree=ROOT,
        heartbeat=5.0,
        mirror=(),
        client_id="bridge-presence",
        toml=None,
        cwd=None,
    ):
        self.tree = os.path.abspath(tree)
        self.cwd = str(cwd or self.tree)
        self.logpath = os.path.join(workdir, "bridge.log")
        self.proc = None
        if toml:
            self.toml = str(toml)
            cfg = config.load(self.toml)
            self.sock = cfg.socket
            self.socks = split.sockets(cfg)  # every worker's (bridge/split.py)
            return
        self.sock = os.path.join(workdir, "bridge.sock")
        self.socks = [self.sock]
        self.toml = os.path.join(workdir, "bridge.toml")
        with open(self.toml, "w") as f:
            f.write(
                '[bridge]\nnode = "gw"\nstate_dir = "%s"\nsocket = "%s"\nheartbeat = %r\n'
                '[mqtt]\nurl = "mqtt://127.0.0.1:%d"\nclient_id = "%s"\nmirror = %s\n'
                "devices = [\n%s]\n"
                % (
                    os.path.join(workdir, "state"),
                    self.sock,
                    heartbeat,
                    broker_port,
                    client_id,
                    json.dumps(list(mirror)),
                    "".join('  {node = "%s", key = "%s"},\n' % kv for kv in devices.items()),
                )
            )

    def start(self):
        with open(self.logpath, "ab") as log:
            self.proc = Process(
                python(daemon_module(self.tree), "--config", self.toml),
                cwd=self.cwd,
                env=env(self.tree),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    def ready(self, timeout=60):
        """Once its status socket exists; AssertionError naming its log when
        it exits first or takes over timeout seconds (it is closed then)."""
        try:
            wait_until(
                lambda: all(os.path.exists(p) for p in self.socks),
                timeout,
                "the bridge's socket(s) (see %s)" % self.logpath,
                step=0.1,
                procs=[self.proc],
            )
        except AssertionError:
            self.close()
            raise
        return self

    def kill(self):
        """SIGKILL: no goodbye; the broker publishes its last will."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self, timeout=20):
        """SIGTERM: the clean stop; returns the exit status."""
        return self.proc.stop(timeout)

    def close(self):
        if self.proc is not None:
            self.proc.close()

    def log(self):
        """What it has written so far."""
        with open(self.logpath, errors="replace") as f:
            return f.read()

    def status(self, timeout=2.0):
        """Its status (what `edgebus status` shows), or None if it cannot say."""
        try:
            return asyncio.run(fetch(self.sock, timeout=timeout))
        except Exception:  # not running (yet), or not answering
            return None

    def wait_status(self, cond, timeout=30, what="the bridge's status", step=0.1):
        """Its status once cond(status) is true, asked every step seconds;
        AssertionError after timeout seconds or at once when it has exited,
        naming what (a string, or a function of the last status it gave)."""
        last = [None]

        def ok():
            last[0] = self.status()
            return last[0] is not None and cond(last[0])

        wait_until(
            ok,
            timeout,
            lambda: what(last[0]) if callable(what) else "%s (last: %s)" % (what, last[0]),
            step=step,
            procs=[self.proc],
        )
        return last[0]

    def link(self, node, kind="mqtt"):
        """The bridge's link to node (Link.stats()), or None if it cannot say."""
        st = self.status()
        return None if st is None else st["links"].get("%s:%s" % (kind, node))
