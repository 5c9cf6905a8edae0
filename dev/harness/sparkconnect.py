"""A Spark Connect server from the installed pyspark (its spark-connect jar,
started by spark-submit) on a free loopback port, for tests and tools: its
Python workers run this interpreter and import this checkout, so the `edgebus`
data source a client registers runs there (docs/spark.md, "Spark Connect")."""

import os
import socket
import subprocess
import tempfile

from dev.broker import free_port
from dev.harness.poll import wait_until
from dev.harness.process import Process, env

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def _spark_submit():
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-submit")


def _listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), 0.5).close()
        return True
    except OSError:
        return False


class SparkConnect:
    """The server on 127.0.0.1 (``url``: sc://127.0.0.1:port), master
    ``master``, more settings in ``conf``; its output goes to a log file
    (``log``). As a context manager it is started and then stopped."""

    def __init__(self, master="local[2]", conf=None):
        from edgebus.ingest.session import LOG4J2, worker_python

        self.port = free_port()
        self.url = "sc://127.0.0.1:%d" % self.port
        self.dir = tempfile.mkdtemp(prefix="edgebus-sparkconnect-")
        self.log = os.path.join(self.dir, "server.log")
        settings = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.ui.enabled": "false",
            # errors only, as the edgebus commands' own JVMs
            "spark.driver.extraJavaOptions": "-Dlog4j2.configurationFile=file:" + LOG4J2,
        }
        settings.update(conf or {})
        self.cmd = [_spark_submit(), "--class", SERVER_CLASS, "--master", master]
        for k, v in settings.items():
            self.cmd += ["--conf", "%s=%s" % (k, v)]
        self.cmd.append("spark-internal")
        self.env = env()
        self.env.update(
            PYSPARK_PYTHON=worker_python(),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOCAL_HOSTNAME="localhost",
        )
        self.env.pop("SPARK_REMOTE", None)  # the server is not a client
        self.proc = None

    def start(self, timeout=120.0):
        """Start the server and wait until it accepts connections."""
        with open(self.log, "ab") as log:
            self.proc = Process(self.cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        wait_until(
            lambda: _listening(self.port),
            timeout,
            lambda: "Spark Connect on port %d: %s" % (self.port, self.output()[-3000:]),
            step=0.25,
            procs=[self.proc],
        )
        return self

    def output(self):
        """What the server has logged so far."""
        with open(self.log, errors="replace") as f:
            return f.read()

    def stop(self):
        """SIGTERM (the server's clean stop), then its whole group killed."""
        if self.proc is not None:
            try:
                self.proc.stop(timeout=20)
            except subprocess.TimeoutExpired:
                pass  # stop() killed the group
            self.proc.close()
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
