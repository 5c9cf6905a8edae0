"""The `edgebus` data source and `edgebus ingest` through Spark Connect: a real
server (dev/harness/sparkconnect.py, the installed pyspark's) on loopback,
clients in processes of their own (a Connect client marks its whole process
as remote), the data source registered from the client and run by the
server's Python workers (docs/spark.md, "Spark Connect")."""

import json
import subprocess
import sys

import pytest

# The server is a JVM this module starts (SparkConnect, not the spark fixture).
pytestmark = pytest.mark.spark

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")
pytest.importorskip("grpc")  # pyspark[connect]'s client

from dev.harness.sparkconnect import SparkConnect  # noqa: E402
from edgebus.tlog import LogWriter  # noqa: E402
from tests.host.spark.sparkkit import (  # noqa: E402
    device_record,
    expected_row,
    ingest,
    local_record,
    spark_env,
)

T0 = 1_712_000_000.0

# A client: every row of the log read by the source, then every row of the
# table, as JSON lines ("log" or "table" first).
READ = """
import json, sys
from edgebus.ingest.session import session
spark = session()  # on SPARK_REMOTE
for what, df in (("log", spark.read.format("edgebus").load(sys.argv[1])),
                 ("table", spark.read.parquet(sys.argv[2]))):
    for r in df.drop("ts_host_time").collect():
        print(json.dumps([what, r.asDict()], default=str))
spark.stop()
"""


@pytest.fixture(scope="module")
def server():
    with SparkConnect() as s:
        yield s


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    """Two devices, a retransmitted copy, host traffic; three sealed
    segments: (log directory, [(record, position)])."""
    path = tmp_path_factory.mktemp("connect") / "log"
    written = []
    with LogWriter(str(path), segment_bytes=3000, gateway="gw-1") as w:
        for i in range(60):
            rec = device_record("node-%d" % (i % 2), "boot-%d" % (i % 2), i // 2, T0 + i)
            written.append((rec, w.append(rec)))
            if i % 20 == 19:
                rec = local_record(i, T0 + i)
                written.append((rec, w.append(rec)))
        rec = device_record("node-0", "boot-0", 3, T0 + 61)  # a copy of seq 3
        written.append((rec, w.append(rec)))
    return str(path), written


def test_the_source_and_ingest_remote_through_connect(server, log, tmp_path):
    """`edgebus ingest --once --remote` writes the table a local run writes
    (tests/host/spark/test_spark_ingest.py's rows: every record once, its
    values and provenance, the date partition), and the source read through
    Connect gives every record's row."""
    import datetime

    path, written = log
    table = str(tmp_path / "table")
    r = ingest(path, table, table + ".ckpt", "--once", "--remote", server.url, timeout=180)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "read %d log records in 1 micro-batches" % len(written) in r.stdout, r.stdout
    assert "Traceback" not in r.stderr and "Warning" not in r.stderr, r.stderr
    r = _python(READ, path, table, env=spark_env(SPARK_REMOTE=server.url))
    assert r.returncode == 0, r.stderr[-3000:]
    rows = {"log": {}, "table": {}}
    for what, row in (json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("[")):
        rows[what][row["segment"], row["offset"]] = row
    want = {pos: expected_row(rec, pos, "gw-1") for rec, pos in written}
    assert rows["log"] == want
    copy = written[-1][1]  # the copy of seq 3, removed
    assert sorted(rows["table"]) == sorted(p for p in want if p != copy)
    for pos, row in rows["table"].items():
        day = datetime.datetime.fromtimestamp(row["ts_host"], datetime.timezone.utc).date()
        assert row.pop("date") == str(day)
        assert row == want[pos]


def _python(code, *args, env):
    """code run by this CPython with args, to its end: the CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=180
    )
