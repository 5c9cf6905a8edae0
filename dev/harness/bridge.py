"""edgebus-bridge as its own process, for the tests and the dev tools."""

import asyncio
import json
import os
import signal
import subprocess

from dev.harness.poll import wait_until
from dev.harness.process import ROOT, Process, env, python
from edgebus.tools.status import fetch


class BridgeProcess:
    """edgebus-bridge as its own process (``python -m edgebus.bridge.daemon``) from a
    checkout ``tree``, for MQTT devices {node: key}, with a status socket;
    or, given ``toml``, run with that configuration as it is. Its output
    goes to ``logpath`` (``log()`` reads it)."""

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
        self.cwd = cwd or self.tree  # relative paths in toml are from here
        self.sock = os.path.join(workdir, "bridge.sock")
        self.toml = toml or os.path.join(workdir, "bridge.toml")
        self.logpath = os.path.join(workdir, "bridge.log")
        self.proc = None
        if toml:
            return
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
                python("edgebus.bridge.daemon", "--config", self.toml),
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
                lambda: os.path.exists(self.sock),
                timeout,
                "the bridge's socket (see %s)" % self.logpath,
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

    def link(self, node, kind="mqtt"):
        """The bridge's link to node (Link.stats()), or None if it cannot say."""
        try:
            st = asyncio.run(fetch(self.sock, timeout=2.0))
        except Exception:  # not running (yet), or not answering
            return None
        return st["links"].get("%s:%s" % (kind, node))
