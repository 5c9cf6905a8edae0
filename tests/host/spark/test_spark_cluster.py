"""`edgebus ingest` on a real Spark standalone cluster: a master and a worker
started from the installed pyspark's own launcher (``spark-class``), on
loopback only, the job run by ``spark-submit --master spark://...``; the table
it writes is the one `local[*]` writes from the same logs (docs/spark.md,
"On a cluster")."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from dev.broker import free_port  # noqa: E402
from dev.harness.process import Process  # noqa: E402
from edgebus.tlog import LogWriter  # noqa: E402
from tests.conftest import TEST_JVM_OPTS, wait_until  # noqa: E402
from tests.host.spark.sparkkit import (  # noqa: E402
    ROOT,
    device_record,
    ingest_here,
    local_record,
    spark_env,
)

T0 = 1_712_000_000.0


def _bin(name):
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "bin", name)


def _env(tmp):
    return spark_env(
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_HOSTNAME="localhost",
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOG_DIR=str(tmp),
        SPARK_WORKER_DIR=str(tmp / "work"),
    )


def _start(cmd, logfile, env):
    with open(logfile, "wb") as log:
        return Process(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)


def _read(path):
    with open(path, errors="replace") as f:
        return f.read()


def _wait_for(logfile, text, proc, timeout=90):
    wait_until(
        lambda: text in _read(logfile),
        timeout,
        lambda: "%r in %s: %s" % (text, logfile, _read(logfile)[-3000:]),
        step=0.2,
        procs=[proc],
    )


@pytest.fixture
def cluster(tmp_path):
    """(master URL, env): a standalone master and one 2-core worker on 127.0.0.1."""
    env = _env(tmp_path)
    port, ui, wui = free_port(), free_port(), free_port()
    url = "spark://127.0.0.1:%d" % port
    procs = []
    try:
        procs.append(
            _start(
                [
                    _bin("spark-class"),
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--webui-port",
                    str(ui),
                ],
                tmp_path / "master.log",
                env,
            )
        )
        _wait_for(tmp_path / "master.log", "I have been elected leader", procs[0])
        procs.append(
            _start(
                [
                    _bin("spark-class"),
                    "org.apache.spark.deploy.worker.Worker",
                    url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "2",
                    "--memory",
                    "2g",
                    "--webui-port",
                    str(wui),
                    "--work-dir",
                    str(tmp_path / "work"),
                ],
                tmp_path / "worker.log",
                env,
            )
        )
        _wait_for(tmp_path / "worker.log", "Successfully registered with master", procs[1])
        yield url, env
    finally:
        for p in reversed(procs):
            try:
                p.stop(30)
            except subprocess.TimeoutExpired:
                pass  # killed with its group
            p.close()  # whatever it started


def _write_logs(root):
    """Two gateways' logs, device and local traffic, and one device record
    logged again by each gateway (gw-2 too: the device's boot heard twice)."""
    logs = []
    for g in ("gw-1", "gw-2"):
        d = root / g
        with LogWriter(str(d), segment_bytes=5000, gateway=g) as w:
            for i in range(400):
                node = "%s-node-%d" % (g, i % 4)
                w.append(device_record(node, node + "-b", i // 4, T0 + i))
                if i % 25 == 0:
                    w.append(local_record(i, T0 + i))
            w.append(device_record("gw-1-node-0", "gw-1-node-0-b", 7, T0 + 500))  # a copy
        logs.append(str(d))
    return logs


def test_cluster_run_gives_the_local_table(cluster, spark, tmp_path):
    from edgebus.ingest.report import read_table

    url, env = cluster
    logs = _write_logs(tmp_path / "logs")
    views = tmp_path / "views.toml"
    views.write_text(
        '[[view]]\nname = "temps"\ntopic = "+/+/temp"\nschema = "temp DOUBLE"\n'
        '[[view]]\nname = "loads"\ntopic = "host/load"\n'
    )
    r = subprocess.run(
        [
            _bin("spark-submit"),
            "--master",
            url,
            "--conf",
            "spark.python.unix.domain.socket.enabled=true",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.sql.shuffle.partitions=4",
            "--conf",
            "spark.executor.memory=1g",
            "--conf",
            "spark.executor.extraJavaOptions=" + TEST_JVM_OPTS,
            "--conf",
            "spark.driver.host=127.0.0.1",
            os.path.join(ROOT, "ingest", "job.py"),
            "--log",
            *logs,
            "--table",
            str(tmp_path / "cluster"),
            "--checkpoint",
            str(tmp_path / "cluster.ckpt"),
            "--once",
            "--views",
            str(views),
        ],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    assert "read %d log records" % (2 * (400 + 16 + 1)) in r.stdout, r.stdout
    # The local table to compare with: the same command on local[2], the
    # shared session's (a JVM of its own would add nothing to the comparison).
    r = ingest_here(spark, logs, tmp_path / "local", tmp_path / "local.ckpt", "--once")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    tables = [
        sorted(map(str, read_table(spark, tmp_path / k).collect())) for k in ("cluster", "local")
    ]
    assert len(tables[0]) == 2 * (400 + 16) and tables[0] == tables[1]
    # The typed views and the delivery audit, written by the job on the cluster.
    from pyspark.sql import functions as F

    from edgebus.ingest.views import read_view

    assert read_view(spark, str(tmp_path / "cluster.views" / "temps")).count() == 800
    loads = read_view(spark, str(tmp_path / "cluster.views" / "loads"))
    assert loads.count() == 32 and "value" in loads.columns
    audit = spark.read.parquet(str(tmp_path / "cluster.audit"))
    got = audit.agg(F.sum("received"), F.sum("missing"), F.sum("duplicates")).first()
    assert tuple(got) == (800, 0, 2), got  # seq 7 of gw-1-node-0 logged three times
