"""`edgebus provision`: new devices, ready for `edgebus deploy` (docs/bridge.md, "Adding devices").

For each NODE: a fresh key in the bridge's keystore, and OUT/NODE/config.json
for the board (its uplink: the board's UART, or MQTT to --broker; WiFi with
--wifi), checked by the firmware's own validation before it is written. A
running bridge is told to read its keystore again (as `edgebus devices
reload`). Every NODE is checked before anything is written, so a refusal
leaves everything as it was."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import re
import ssl
import sys
import tomllib
import urllib.parse
from typing import TYPE_CHECKING, Any

from edgebus.bridge import config as bridge_config
from edgebus.bridge.keystore import KeyStoreError, new_key
from edgebus.link.handshake import kid
from edgebus.tools.boardkit import boards, devicefiles
from edgebus.tools.commands import busclient as bc
from edgebus.tools.commands import keys
from edgebus.tools.commands.progress import progress

if TYPE_CHECKING:
    from edgebus.bridge.keystore import KeyStore

# A node id is a topic level, a key file's name and an MQTT client id: plain
# characters only, whatever the layers below would also take.
NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
PASSWORD_ENV = "EDGEBUS_WIFI_PASSWORD"
BAR_ABOVE = 5  # nodes: more than this many get a progress bar
SCHEMES = {"mqtt": 1883, "mqtts": 8883}

EPILOG = (
    """\
Many devices at once: give them all, e.g. pump-{001..100} in bash. The WiFi
password comes from --wifi-password-file, else $%s, else a prompt on a
terminal (never from the command line). --force replaces a device's key in
the keystore and its config: the device keeps its old key until the new
config is deployed, and cannot link meanwhile (edgebus keys rotate changes a
running device's key without that gap)."""
    % PASSWORD_ENV
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("nodes", nargs="+", metavar="NODE", help="the new devices' node ids")
    p.add_argument("--board", required=True, metavar="B", help="board name or manifest path")
    p.add_argument(
        "--broker",
        metavar="URL",
        help="mqtt://host[:port] or mqtts://host[:port] (TLS, with --ca): the MQTT "
        "uplink (default: the board's own uplink, its UART)",
    )
    p.add_argument(
        "--ca",
        metavar="FILE",
        help="the CA certificate (PEM or DER) the broker's certificate chains to, for "
        "mqtts: copied beside each config",
    )
    p.add_argument(
        "--server-name",
        metavar="NAME",
        help="the name the broker's certificate carries (default: the URL's host)",
    )
    p.add_argument("--wifi", metavar="SSID", help="join this WiFi network first (boards with WiFi)")
    p.add_argument(
        "--wifi-password-file", metavar="FILE", help="the WiFi password, the file's first line"
    )
    p.add_argument(
        "--ntp",
        metavar="HOST",
        help="set the clock from this NTP server (with --broker; firmware/README.md, Time)",
    )
    p.add_argument(
        "--sleep",
        type=float,
        metavar="SECONDS",
        help="duty cycle: wake every SECONDS, send, deep-sleep (a flash journal keeps "
        "what is not acknowledged; firmware/README.md, Sleep)",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        default="devices",
        help="where each device's folder goes: DIR/NODE/config.json (default: %(default)s)",
    )
    p.add_argument(
        "--bridge-config",
        metavar="TOML",
        help="the bridge's configuration: its keystore gets the keys, its socket the reload",
    )
    p.add_argument(
        "--keys",
        metavar="DIR",
        help="the keystore directory (default: the --bridge-config's, else %s)"
        % os.path.join(bridge_config.Config.state_dir, "keys"),
    )
    p.add_argument(
        "--force", action="store_true", help="replace existing devices' keys and configs"
    )
    p.epilog = EPILOG
    p.formatter_class = argparse.RawDescriptionHelpFormatter


def broker_uplink(url: str, ca: str | None, server_name: str | None) -> dict[str, Any]:
    """The device config's MQTT uplink for a broker URL; bc.Fail when it does not parse."""
    u = urllib.parse.urlsplit(url)
    try:
        port = u.port
    except ValueError:
        port = -1
    if (
        u.scheme not in SCHEMES
        or not u.hostname
        or port == -1
        or u.path not in ("", "/")
        or u.query
        or u.fragment
        or u.username
    ):
        raise bc.Fail(
            2,
            "--broker %r: expected mqtt://host[:port] or mqtts://host[:port] "
            "(no path, no user: the device logs in with its key)" % url,
        )
    up: dict[str, Any] = {"kind": "mqtt", "host": u.hostname, "port": port or SCHEMES[u.scheme]}
    if u.scheme == "mqtts":
        if not ca:
            raise bc.Fail(
                2,
                "--broker %s is TLS: give --ca FILE, the CA the broker's certificate chains to "
                "(a device has no CA store)" % url,
            )
        up["tls"] = {"ca": os.path.basename(ca), "server_name": server_name or u.hostname}
    elif ca or server_name:
        raise bc.Fail(2, "--ca and --server-name are for an mqtts:// broker, not %s" % url)
    return up


def uart_uplink(board: dict[str, Any]) -> dict[str, Any]:
    """The device config's UART uplink on the board's own UART."""
    u = board["uart"]
    if "device" in u:
        if not u["device"]:
            raise bc.Fail(
                2,
                "board %s has no UART of its own (its simulator's is a pty given at run "
                "time): give --broker mqtt://host[:port]" % board["name"],
            )
        return {"kind": "uart", "port": u["device"], "baud": u["baud"]}
    return {"kind": "uart", "port": u["id"], "baud": u["baud"]} | {
        k: u[k] for k in ("tx", "rx") if k in u
    }


def read_ca(path: str) -> bytes:
    """The CA file's bytes, once they are a certificate the device can use:
    DER, or PEM whose first block is a certificate (the one the firmware
    takes); bc.Fail otherwise (a private key is never copied to devices)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise bc.Fail(2, "--ca: %s" % e) from None
    i = data.find(b"-----BEGIN ")
    first = data[i + 11 : data.find(b"-----", i + 11)] if i >= 0 else b"CERTIFICATE"
    try:
        if first != b"CERTIFICATE":
            raise ValueError("its first PEM block is %s" % first.decode("ascii", "replace"))
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(
            cadata=data.decode("ascii") if i >= 0 else data
        )
    except (ssl.SSLError, ValueError) as e:
        raise bc.Fail(2, "--ca %s is not a CA certificate (PEM or DER): %s" % (path, e)) from None
    return data


def wifi_password(args: argparse.Namespace) -> str | None:
    """The WiFi password: the file's first line, the environment, or a prompt
    on a terminal; bc.Fail when none of them gives one."""
    if args.wifi_password_file:
        try:
            with open(args.wifi_password_file) as f:
                return f.readline().rstrip("\r\n") or None
        except OSError as e:
            raise bc.Fail(2, "--wifi-password-file: %s" % e) from None
    if PASSWORD_ENV in os.environ:
        return os.environ[PASSWORD_ENV] or None
    if sys.stdin.isatty():
        return getpass.getpass("password of WiFi %r (empty: an open network): " % args.wifi) or None
    raise bc.Fail(
        2,
        "--wifi %s needs its password: --wifi-password-file FILE or $%s (a terminal "
        "prompts for it)" % (args.wifi, PASSWORD_ENV),
    )


def device_config(args: argparse.Namespace, board: dict[str, Any]) -> dict[str, Any]:
    """The config every NODE gets (node and key set per device after)."""
    if args.broker:
        uplink = broker_uplink(args.broker, args.ca, args.server_name)
    elif board["uplink"] == "mqtt":
        raise bc.Fail(
            2, "board %s's uplink is MQTT: give --broker mqtt://host[:port]" % board["name"]
        )
    elif args.ca or args.server_name:
        raise bc.Fail(2, "--ca and --server-name go with --broker mqtts://...")
    else:
        uplink = uart_uplink(board)
    with open(os.path.join(devicefiles.FIRMWARE_DIR, "config.example.json")) as f:
        cfg: dict[str, Any] = json.load(f)
    cfg.update(board=board["name"], uplink=uplink)
    if args.wifi is not None:
        if not board["wifi"]:
            raise bc.Fail(
                2,
                "board %s has no WiFi radio: leave out --wifi (its network is the "
                "host's or a cable's)" % board["name"],
            )
        if uplink["kind"] != "mqtt":
            raise bc.Fail(2, "--wifi goes with --broker: a UART uplink needs no network")
        cfg["network"] = {"ssid": args.wifi, "password": wifi_password(args)}
    # The unix port and CPython have no RTC, deep sleep or watchdog of their
    # own: their configs name the simulators (firmware/README.md).
    sim = board["runtime"] == "cpython" or board["firmware"]["port"] == "unix"
    if args.ntp is not None:
        if uplink["kind"] != "mqtt":
            raise bc.Fail(2, "--ntp goes with --broker: a UART uplink has no IP network")
        cfg["time"] = {"ntp": args.ntp} | ({"rtc": "firmware.rtcsim"} if sim else {})
    if args.sleep is not None:
        s = args.sleep
        cfg["sleep"] = {"every": int(s) if s.is_integer() else s}  # 300, not 300.0
        cfg["link"] = dict(cfg.get("link") or {}, journal="journal")
    return cfg


def _check_nodes(args: argparse.Namespace, store: KeyStore) -> dict[str, str | None]:
    """{node: the kid its keystore entry has now (None: none)}, each checked."""
    if len(set(args.nodes)) != len(args.nodes):
        raise bc.Fail(
            2,
            "a node is given twice: %s"
            % sorted({n for n in args.nodes if args.nodes.count(n) > 1}),
        )
    held: dict[str, str | None] = {}
    for node in args.nodes:
        if not NODE.match(node):
            raise bc.Fail(
                2,
                "node %r: a node id is 1-64 letters, digits, '-', '_' or '.', starting "
                "with a letter or digit" % node,
            )
        held[node] = keys.held(store, node, args.force)
        path = os.path.join(args.out, node, "config.json")
        if os.path.exists(path) and not args.force:
            raise bc.Fail(1, "%s exists (--force replaces it and the node's key)" % path)
    return held


def _takes_keystore(args: argparse.Namespace) -> bool:
    """Whether the bridge's configuration links every MQTT device of its keystore."""
    if not args.bridge_config:
        return False
    try:
        with open(args.bridge_config, "rb") as f:
            mq = tomllib.load(f).get("mqtt")
    except (OSError, tomllib.TOMLDecodeError):
        return False  # keystore_dir() has said what is wrong with it
    return isinstance(mq, dict) and mq.get("keystore") is True


def _reload(args: argparse.Namespace, store: KeyStore) -> None:
    """Tell a running bridge to read the keystore again, or say it is not running."""
    from edgebus.tools.commands import devices

    sock = bc.socket_path(argparse.Namespace(socket=None, config=args.bridge_config))
    try:
        r = asyncio.run(devices.reload_devices(sock))
    except bc.Fail as e:
        print("no running bridge to reload (%s): it reads %s when it starts" % (e, store.path))
        return
    print("the bridge at %s reloaded: %s" % (sock, devices.changes_line(r)))


def provision(args: argparse.Namespace) -> None:
    try:
        board = boards.load_board(args.board)
    except boards.BoardError as e:
        raise bc.Fail(2, str(e)) from None
    store = keys.store_at(args.keys, args.bridge_config)
    held = _check_nodes(args, store)
    base = device_config(args, board)
    fwconfig = devicefiles.firmware("config")
    try:  # the firmware's own check, once, before anything is written
        fwconfig.validate(dict(base, node=args.nodes[0], key=new_key()))
    except fwconfig.ConfigError as e:
        raise bc.Fail(2, "the device would refuse this config: %s" % e) from None
    ca = read_ca(args.ca) if args.ca else None
    bar = progress(len(args.nodes), "provision", "nodes") if len(args.nodes) > BAR_ABOVE else None
    say = bar.write if bar else print
    for node in args.nodes:
        key = new_key()
        cfg = dict(base, node=node, key=key)
        fwconfig.validate(cfg)  # each as written (node and key)
        d = os.path.join(args.out, node)
        os.makedirs(d, mode=0o700, exist_ok=True)
        if ca is not None:
            keys.write_secret(os.path.join(d, cfg["uplink"]["tls"]["ca"]), ca)
        keys.write_secret(
            os.path.join(d, "config.json"), (json.dumps(cfg, indent=2) + "\n").encode()
        )
        store.issue(node, key)
        line = "%s: key kid %s, %s" % (node, kid(key.encode()), os.path.join(d, "config.json"))
        if held[node] is not None:
            line += (
                " (replaced key kid %s: the device links again once this config is deployed)"
                % held[node]
            )
        say(line)
        if bar:
            bar.update(1)
    if bar:
        bar.close()
    print("%d device(s) in the keystore %s" % (len(args.nodes), store.path))
    if base["uplink"]["kind"] == "uart":
        print(
            "a UART device links through a [[serial]] entry (node, port; its key is in the "
            "keystore): add one each to the bridge's configuration"
        )
    elif not _takes_keystore(args):
        print(
            "a bridge links them from its keystore with [mqtt] keystore = true; else list "
            'each in [mqtt].devices ({node = "%s"}, no key needed there)' % args.nodes[0]
        )
    _reload(args, store)
    first = os.path.join(args.out, args.nodes[0])
    print(
        "next, for each device: edgebus deploy --board %s --port PORT --config %s"
        % (board["name"], os.path.join(first, "config.json"))
    )
    if board["firmware"]["port"] == "unix" and base["uplink"]["kind"] == "mqtt":
        print("or run them all on the unix port: edgebus fleet --from %s" % args.out)


def run(args: argparse.Namespace) -> int:
    try:
        provision(args)
    except bc.Fail as e:
        print("edgebus provision: %s" % e, file=sys.stderr)
        return e.code
    except (OSError, KeyStoreError) as e:
        print("edgebus provision: %s" % e, file=sys.stderr)
        return 1
    return 0
