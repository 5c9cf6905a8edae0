"""Run a real mosquitto broker on a free loopback port (tests, demo, benchmarks):
the harness's broker (dev/harness/; tests/conftest.py's ``broker`` fixture)."""

import os
import shutil
import socket
import subprocess
import tempfile
import time

from dev.harness.process import Process


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_mosquitto():
    exe = shutil.which("mosquitto") or (
        "/usr/sbin/mosquitto" if os.path.exists("/usr/sbin/mosquitto") else None
    )
    if exe is None:
        raise RuntimeError(
            "mosquitto is not installed: apt-get install mosquitto (./do setup does)"
        )
    return exe


class Mosquitto:
    """A mosquitto process listening on 127.0.0.1:port only; stop() and start()
    again keep the same port, so clients can be tested across a broker restart."""

    def __init__(self, port=None, tls=None, options=()):
        """tls: {"ca", "cert", "key"} file paths: the listener speaks TLS only,
        with that server certificate (clients verify it against ca).
        options: more mosquitto.conf lines (e.g. "sys_interval 1")."""
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="edgebus-mosquitto-")
        self.conf = os.path.join(self.dir, "mosquitto.conf")
        # Its log goes to a file: a pipe nobody reads fills (64 KB, a few
        # hundred connects) and then blocks the broker.
        self.log = os.path.join(self.dir, "mosquitto.log")
        # set_tcp_nodelay: small telemetry messages go out at once instead of
        # waiting for Nagle's algorithm (it took p99 latency from ~30 ms to <1 ms).
        with open(self.conf, "w") as f:
            f.write(
                "listener %d 127.0.0.1\nallow_anonymous true\npersistence false\n"
                "log_dest stderr\nset_tcp_nodelay true\n" % self.port
            )
            f.write("".join(line + "\n" for line in options))
            if tls:
                f.write(
                    "cafile %s\ncertfile %s\nkeyfile %s\n"
                    % tuple(self._readable(tls[k]) for k in ("ca", "cert", "key"))
                )
        self.proc = None

    def _readable(self, path):
        """A copy of path the broker can read: started as root, mosquitto
        drops to its own user, which may not enter the caller's directories."""
        os.chmod(self.dir, 0o755)
        dest = os.path.join(self.dir, os.path.basename(path))
        shutil.copyfile(path, dest)
        os.chmod(dest, 0o644)
        return dest

    def start(self, timeout=5.0):
        with open(self.log, "ab") as log:
            self.proc = Process(
                [find_mosquitto(), "-c", self.conf], stdout=subprocess.DEVNULL, stderr=log
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    with open(self.log, errors="replace") as f:
                        raise RuntimeError("mosquitto exited: " + f.read()[-2000:]) from None
                time.sleep(0.05)
        raise RuntimeError("mosquitto did not listen on port %d" % self.port)

    def stop(self):
        """Kill the broker (as a crash would: no clean goodbye to clients)."""
        if self.proc is not None:
            self.proc.close()
        self.proc = None

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()
