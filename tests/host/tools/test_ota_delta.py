"""Delta updates with real parts: fleet devices (the real firmware on the
MicroPython unix port, which has deflate) over a real mosquitto, the bridge
as a process and `edgebus ota push` as a user runs it. A device copies the
files it already holds, takes the rest compressed, and ends with the very
bytes of the bundle; a delta cut off by a power cut resumes."""

import os
import re

import pytest

from dev.harness.ota import bundle_hash, mqtt_fleet, ota, status
from edgebus.tools.commands import otadelta
from edgebus.tools.commands.otapush import positions
from tests.host.tools import otakit

pytestmark = [pytest.mark.micropython]

SENT = re.compile(r"^(\S+): committed (\S+) in \d+ s \(sent (\d+) of (\d+) bytes in [\d.]+ s\)$")
SERVICE = "firmware/services/temp.mpy"  # what otakit's "service" release changes


def push(sock, bundle, node, *more):
    """`edgebus ota push` of bundle to node, committed: (bytes sent, the bundle's)."""
    r = ota(sock, "push", "--yes", "--bundle", bundle, "--to", node, *more)
    m = SENT.match(r.stdout.splitlines()[-2]) if r.returncode == 0 else None
    assert m and m.group(1) == node, r.stdout + r.stderr
    return int(m.group(3)), int(m.group(4))


def assert_slot_is(fleet, node, sock, bundle):
    """The device runs bundle from a slot holding exactly its files."""
    st = status(sock)[node]
    assert st["state"] == "committed" and st["running"]["hash"] == bundle_hash(bundle), st
    slot = os.path.join(fleet.out, "devices", node, "ota", st["running"]["slot"])
    for path, _size, _sha in otakit.manifest(bundle)["files"]:
        with open(os.path.join(slot, path), "rb") as f:
            assert f.read() == otakit.file_bytes(bundle, path), path
    with open(os.path.join(slot, "ota.jsonl"), "rb") as f:
        assert f.read() == otakit.manifest_bytes(bundle)


@pytest.mark.mosquitto
def test_a_one_service_change_sends_that_file_compressed_and_a_cut_delta_resumes(tmp_path):
    base = otakit.bundle(tmp_path, "same", version="1.0.0")
    svc = otakit.bundle(tmp_path, "service", version="1.0.1")
    good = otakit.bundle(tmp_path, "good", version="9.9.9")  # its firmware/__init__ changed
    man = len(otakit.manifest_bytes(svc))
    changed = len(otakit.file_bytes(svc, SERVICE))
    huge = otakit.oversized(tmp_path, base, 4 << 20, "blob.py")  # more code than any heap here
    with mqtt_fleet(tmp_path, 1) as (fleet, bridge):
        sock = bridge.sock
        node = fleet.devices[0]["node"]

        # Code larger than the device's whole GC heap could never load on its
        # trial: refused from begin's heap figure, before a byte is sent.
        r = ota(sock, "push", "--yes", "--bundle", huge, "--to", node)
        m = re.search(
            r"^%s: failed: its code cannot load: the bundle's modules take (\d+) bytes and "
            r"its whole heap is (\d+); " % node,
            r.stdout,
            re.M,
        )
        assert r.returncode == 1 and m and int(m.group(2)) < int(m.group(1)), r.stdout + r.stderr
        assert (status(sock)[node].get("staged") or {}).get("bytes") is None, status(sock)[node]

        # --full copies nothing: every byte crosses, compressed (the device has
        # deflate), and the slot holds the bundle's very bytes.
        full, total = push(sock, base, node, "--full")
        assert total == sum(f[1] for f in otakit.manifest(base)["files"]) + man
        assert full < 0.85 * total, (full, total)
        assert_slot_is(fleet, node, sock, base)
        # --no-compress as well: the bundle as it is, byte for byte.
        plain, svc_total = push(sock, svc, node, "--full", "--no-compress")
        assert plain == svc_total == sum(f[1] for f in otakit.manifest(svc)["files"]) + man
        assert_slot_is(fleet, node, sock, svc)

        # One service changed: the manifest and that file cross, the device
        # copies the rest from the slot it runs.
        sent, _ = push(sock, base, node)
        assert 0 < sent <= man + changed and sent < 0.1 * full, (sent, man, changed, full)
        assert_slot_is(fleet, node, sock, base)

        # A delta cut off by a power cut: the manifest, a copy call's files and
        # the first chunk of the one changed file on flash, then the power goes.
        dev = otakit.Calls(sock, node)
        m = otakit.manifest_bytes(good)
        r = dev.call({"op": "begin", "version": "9.9.9", "hash": bundle_hash(good), "size": len(m)})
        assert r[0] == "ok" and r[1]["copy"] is True and r[1]["deflate"] == otadelta.WBITS, r
        assert r[1]["free"] > 0
        assert dev.put(0, 0, m) == ("ok", {"next": len(m)})
        paths = [f[0] for f in otakit.manifest(good)["files"]]
        i = paths.index("firmware/__init__.mpy") + 1
        r = dev.call({"op": "copy", "from": 1})
        assert r[0] == "ok" and r[1]["next"] and i not in r[1]["copied"], r
        first = otakit.file_bytes(good, paths[i - 1])
        assert dev.put(i, 0, first[: otakit.CHUNK]) == ("ok", {"next": otakit.CHUNK})
        fleet.kill(node)
        fleet.start(node)
        sent, _ = push(sock, good, node)
        # What crossed is the rest of that file, compressed: nothing twice.
        assert 0 < sent <= len(first) - otakit.CHUNK, (sent, len(first))
        assert_slot_is(fleet, node, sock, good)
        with open(fleet.devices[0]["log"]) as f:
            assert "READY node=%s fw=9.9.9" % node in f.read()


def test_what_begin_says_the_device_can_and_whether_the_bundle_fits():
    # A device whose firmware predates delta updates says none of it: it
    # gets every byte, plain, and no fit is checked before the transfer.
    old = otadelta.Caps({"slot": "a", "have": [0]})
    assert (old.copy, old.wbits, old.free) == (False, None, None)
    new = {"slot": "a", "have": [0], "copy": True, "deflate": 12, "free": 5000}
    c = otadelta.Caps(new)
    assert (c.copy, c.wbits, c.free) == (True, otadelta.WBITS, 5000)
    c = otadelta.Caps(new, full=True, compress=False)
    assert (c.copy, c.wbits) == (False, None)
    assert otadelta.Caps(dict(new, deflate=True, free=-1)).wbits is None
    sizes = [300, 4000, 2000]
    assert otadelta.too_big(sizes, [0, 0, 0], None) is None
    assert otadelta.too_big(sizes, [300, 0, 2000], 4000) is None  # what is on flash counts
    assert otadelta.too_big(sizes, [0, 0, 0], 6000) == (
        "does not fit its flash: the bundle needs 6300 more bytes, 6000 are free"
    )
    assert positions([300, 4000, 2000], sizes) == sizes
    # Code larger than the whole heap: only .mpy and .py count, and a device
    # that says no heap (CPython) is not judged.
    assert otadelta.Caps(dict(new, heap=65536)).heap == 65536
    paths = ["ota.jsonl", "firmware/main.mpy", "firmware/data.json", "edgebus/bus.py"]
    sizes = [300, 40000, 90000, 30000]
    assert otadelta.code_too_big(paths, sizes, None) is None
    assert otadelta.code_too_big(paths, sizes, 70000) is None
    assert otadelta.code_too_big(paths, sizes, 65536).startswith(
        "its code cannot load: the bundle's modules take 70000 bytes and its whole heap is 65536"
    )


def test_compressed_puts_decode_to_the_file_and_carry_more_than_plain_ones():
    import struct
    import zlib

    text = b"".join(b"line %d of a module's text, much like the last\n" % i for i in range(400))
    noise = os.urandom(3000)
    p = otadelta.Packer([b"manifest", text, noise, b""])
    for wbits in (9, 10):
        got = []
        for i, end, data in p.puts([1], [0, 0, 0, 0], wbits):
            head, body = (8, data[8:]) if data[0] & 0x80 else (6, data[6:])
            idx, off = struct.unpack(">HI", data[:6])
            assert len(data) - head <= otadelta.ZDATA and idx & 0x7FFF == i == 1
            if head == 8:
                assert idx & otadelta.ZBIT and struct.unpack(">H", data[6:8])[0] == end - off
                d = zlib.decompressobj(-wbits)
                body = d.decompress(body) + d.flush()
            assert off == len(b"".join(got)) and len(body) == end - off
            got.append(body)
        assert b"".join(got) == text and len(got) < len(text) / otadelta.CHUNK / 2
    # Noise does not compress: plain puts of CHUNK bytes; an empty file, one put.
    puts = list(p.puts([2, 3], [0, 0, 0, 0], 10))
    assert [(i, end, len(d)) for i, end, d in puts] == [
        (2, 768, 774),
        (2, 1536, 774),
        (2, 2304, 774),
        (2, 3000, 702),
        (3, 0, 6),
    ]
