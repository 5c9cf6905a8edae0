"""The fleet simulator: N devices, each the real firmware (firmware/, compiled
to .mpy) on the real MicroPython unix port, with its own node id, key and
uplink: a pseudo-terminal serial line (tools/ptycable.py stands in for the
cable) or MQTT. Used by the demo, the bridge tests and the benchmarks; the
`edgebus fleet` command runs one and prints the bridge configuration that
joins it.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from tools import mpybuild
from tools.ptycable import PtyCable

DEVICE_HEAP = "224K"    # core + link + firmware on the 64-bit unix port


class Fleet:
    """Simulated devices. ``serial`` devices get a PtyCable each (their bridge
    port is ``cable.b``); ``mqtt`` devices connect to ``broker`` (host, port).
    ``uplink``: more uplink config for every device (e.g. failover gateways)."""

    def __init__(self, out, serial=0, mqtt=0, broker=None, prefix="sim", period=0.2,
                 health_period=2.0, heap=DEVICE_HEAP, link=None, uplink=None):
        if mqtt and broker is None:
            raise ValueError("MQTT devices need a broker (host, port)")
        self.out = os.path.abspath(out)
        self.bundle = tempfile.mkdtemp(prefix="edgebus-fleet-")
        mpybuild.compile_packages(["edgebus", "firmware"], self.bundle)
        self.devices = []      # dicts: node, key, kind, port (serial), config, log, proc
        self.cables = []
        self.heap = heap
        uplink_more = uplink or {}
        for i in range(serial + mqtt):
            node = "%s-%d" % (prefix, i + 1) if i < serial else "%s-mqtt-%d" % (prefix, i - serial + 1)
            if i < serial:
                cable = PtyCable()
                self.cables.append(cable)
                uplink = {"kind": "uart", "port": cable.a, "baud": 115200}
                d = {"node": node, "kind": "serial", "port": cable.b, "cable": cable}
            else:
                uplink = {"kind": "mqtt", "host": broker[0], "port": broker[1]}
                d = {"node": node, "kind": "mqtt"}
            uplink.update({"backoff_min": 0.2, "backoff_max": 2.0})
            uplink.update(uplink_more)
            d["key"] = "fleet-key-" + node
            d["config"] = self._config(node, d["key"], uplink, period, health_period, link)
            d["log"] = os.path.join(self.out, "devices", node + ".log")
            self.devices.append(d)

    def _config(self, node, key, uplink, period, health_period, link):
        cfg = {"node": node, "key": key, "board": "unix", "uplink": uplink,
               "link": link or {"heartbeat": 1.0}, "health_period": health_period,
               "services": [{"module": "temp", "period": period}]}
        d = os.path.join(self.out, "devices", node)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "config.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        return path

    def start(self, node=None):
        """Start every device (or one): a micropython process each."""
        for d in self.devices:
            if node is not None and d["node"] != node:
                continue
            log = open(d["log"], "a")
            d["proc"] = subprocess.Popen(
                [mpybuild.micropython(), "-X", "heapsize=" + self.heap, "-m", "firmware.main",
                 d["config"]], cwd=self.bundle, stdout=log, stderr=subprocess.STDOUT)
        return self

    def kill(self, node):
        """Kill one device as a power cut would."""
        for d in self.devices:
            if d["node"] == node and d.get("proc"):
                d["proc"].kill()
                d["proc"].wait()

    def bridge_config(self, broker=None):
        """The [[serial]] and [mqtt] parts of a bridge configuration for this fleet."""
        cfg = {"serial": [{"node": d["node"], "port": d["port"], "key": d["key"]}
                          for d in self.devices if d["kind"] == "serial"]}
        mq = [{"node": d["node"], "key": d["key"]} for d in self.devices if d["kind"] == "mqtt"]
        if mq:
            cfg["mqtt"] = {"url": "mqtt://%s:%d" % broker, "devices": mq}
        return cfg

    def stop(self):
        for d in self.devices:
            p = d.get("proc")
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        for c in self.cables:
            c.close()
        shutil.rmtree(self.bundle, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def bridge_toml(cfg):
    """A bridge TOML fragment for the fleet (what `edgebus fleet` prints)."""
    L = []
    for s in cfg.get("serial", []):
        L += ["[[serial]]", 'node = "%s"' % s["node"], 'port = "%s"' % s["port"],
              'key = "%s"' % s["key"], ""]
    mq = cfg.get("mqtt")
    if mq:
        L += ["[mqtt]", 'url = "%s"' % mq["url"], "devices = ["]
        L += ['  {node = "%s", key = "%s"},' % (d["node"], d["key"]) for d in mq["devices"]]
        L += ["]", ""]
    return "\n".join(L)


def add_arguments(p):
    p.add_argument("--devices", "-n", type=int, default=3, help="how many devices")
    p.add_argument("--mqtt", metavar="HOST:PORT",
                   help="connect the devices over MQTT to this broker (default: serial ptys)")
    p.add_argument("--out", default="out/fleet", help="device configs and logs")
    p.add_argument("--period", type=float, default=1.0, help="sensor period in seconds")
    p.add_argument("--config-out", help="also write the bridge TOML fragment to this file")


def run(args):
    broker = None
    if args.mqtt:
        host, _, port = args.mqtt.rpartition(":")
        if not host or not port.isdigit():
            raise SystemExit("edgebus fleet: --mqtt takes HOST:PORT")
        broker = (host, int(port))
    n = args.devices
    if n < 1:
        raise SystemExit("edgebus fleet: --devices must be at least 1")
    fleet = Fleet(args.out, serial=0 if broker else n, mqtt=n if broker else 0,
                  broker=broker, period=args.period)
    fleet.start()
    frag = bridge_toml(fleet.bridge_config(broker))
    if args.config_out:
        with open(args.config_out, "w") as f:
            f.write(frag)
    print("edgebus fleet: %d simulated devices (MicroPython unix port) running; logs in %s"
          % (n, fleet.out))
    print("join them with edgebus-bridge using:\n\n" + frag)
    print("Ctrl-C stops the fleet.", flush=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    try:
        while not stop:
            time.sleep(0.5)
            dead = [d["node"] for d in fleet.devices if d["proc"].poll() is not None]
            if dead:
                print("edgebus fleet: device(s) exited: %s (see their logs)" % ", ".join(dead))
                return 1
    except KeyboardInterrupt:
        pass
    finally:
        fleet.stop()
    return 0


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(prog="python -m tools.fleet")
    add_arguments(ap)
    sys.exit(run(ap.parse_args()))
