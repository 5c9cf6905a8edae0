"""What the update tests share beside dev/harness/ota.py: bundles (the real
runtime built by edgebus build, its firmware changed as a release might
change it, good or bad) and a device's sys/ota/op called directly."""

import os
import shutil
import struct

from edgebus.tools.boardkit import boards, build, devicefiles, otamanifest
from edgebus.tools.commands.otadelta import CHUNK

# kind -> (file under firmware/, text, replacement): what the release changed.
CHANGES = {
    # A good release: a new version string, so sys/info shows the slot's code runs.
    "good": ("__init__.py", 'VERSION = "0.1.0"', 'VERSION = "9.9.9"'),
    # A one-service change: the sensor's reading moves by a degree.
    "service": ("services/temp.py", "21.0 + 3.0 *", "22.0 + 3.0 *"),
    # A service that raises when imported.
    "crash": ("services/temp.py", "import asyncio\n", 'raise RuntimeError("boom at import")\n'),
    # A service that blocks the event loop for good: only the watchdog gets it out.
    "hang": (
        "services/temp.py",
        '    c = ctx.connect("temp")\n',
        "    while True:\n        pass\n",
    ),
    # A main module that never returns from its import: only the watchdog the
    # loader started before importing it gets the device out.
    "hangmain": ("main.py", "TRIAL_WDT_MS = 30000\n", "while True:\n    pass\n"),
    # A release whose MQTT topics moved: the device never gets a session.
    "nosession": ("__init__.py", '("prefix", "edgebus")', '("prefix", "elsewhere")'),
}


def bundle(tmp, kind, board="unix", version=None):
    """Build the bundle of a release of this kind into tmp/<kind>; its dir."""
    # The package keeps its name, firmware: the bundle's paths are the same.
    src = os.path.join(str(tmp), "src-" + kind, "firmware")
    shutil.copytree(
        devicefiles.FIRMWARE_DIR, src, ignore=shutil.ignore_patterns("__pycache__", "*.md")
    )
    if kind != "same":
        name, old, new = CHANGES[kind]
        path = os.path.join(src, name)
        with open(path) as f:
            text = f.read()
        assert old in text, "%s no longer holds %r: update otakit.CHANGES" % (name, old)
        with open(path, "w") as f:
            f.write(text.replace(old, new, 1))
    out = os.path.join(str(tmp), kind)
    build.build(
        boards.load_board(board),
        out,
        [devicefiles.CORE_DIR, src],
        bundle_version=version or kind,
        log=lambda s: None,
    )
    return out


def oversized(tmp, d, extra, name="blob.json"):
    """Bundle d with one more file of extra bytes (firmware/<name>), its
    manifest rewritten to list it: a bundle that cannot fit a small flash
    (or, named .py, a small heap)."""
    out = os.path.join(str(tmp), os.path.basename(d) + "-oversized")
    shutil.copytree(d, out)
    blob = b"[%s]" % b" " * (extra - 2)
    with open(os.path.join(out, "firmware", name), "wb") as f:
        f.write(blob)
    meta = manifest(d)
    meta["files"].append(["firmware/" + name, len(blob), sha256(blob)])
    with open(os.path.join(out, "ota.jsonl"), "wb") as f:
        f.write(otamanifest.encode_manifest(meta))
    return out


def manifest_bytes(d):
    """The bundle's ota.jsonl as sent (its SHA-256 is the bundle's hash)."""
    with open(os.path.join(d, "ota.jsonl"), "rb") as f:
        return f.read()


def manifest(d):
    """The bundle's manifest as a dict, ``files`` the list."""
    return otamanifest.decode_manifest(manifest_bytes(d))


def file_bytes(d, path):
    with open(os.path.join(d, path), "rb") as f:
        return f.read()


def sha256(data):
    import hashlib

    return hashlib.sha256(data).hexdigest()


class Calls:
    """A device's sys/ota/op called directly over the bridge's socket, as a
    party holding the socket but not playing by edgebus ota's rules would."""

    def __init__(self, sock, node):
        self.sock = sock
        self.topic = "dev/%s/sys/ota/op" % node
        self.node = node

    async def _call(self, payload):
        import edgebus
        from edgebus.tools.commands.busclient import Session

        async with Session(self.sock) as s:
            try:
                return "ok", await s.conn.call(self.topic, payload, timeout=10)
            except edgebus.Failed as e:
                return "failed", e.reason

    def call(self, payload):
        """("ok", reply) or ("failed", the device's reason)."""
        import asyncio

        return asyncio.run(self._call(payload))

    def put(self, index, offset, data):
        """data from offset on, in chunks a call carries: the first refusal,
        else the last reply."""
        for i in range(0, len(data), CHUNK):
            r = self.call(struct.pack(">HI", index, offset + i) + data[i : i + CHUNK])
            if r[0] != "ok":
                return r
        return r

    def health(self):
        """The device's next sys/health."""
        import asyncio

        from edgebus.tools.commands.busclient import Session

        topic = "dev/%s/sys/health" % self.node

        async def one():
            async with Session(self.sock, imports=[(topic, "")]) as s:
                sub = s.conn.subscribe(topic)
                return (await asyncio.wait_for(sub.recv(), 30)).payload

        return asyncio.run(one())
