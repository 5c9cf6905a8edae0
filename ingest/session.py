"""The SparkSession the edgebus commands run in: the data source registered,
Python workers that import this edgebus, quiet logs, the job's sink defaults,
and the code shipped to a cluster's executors."""

from __future__ import annotations

import atexit
import os
import sys
import tempfile
import zipfile
from typing import TYPE_CHECKING

import edgebus
from edgebus.ingest import compaction

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The directory holding the edgebus package (the checkout, or site-packages):
# what Python workers need on their path.
PACKAGE = os.path.dirname(os.path.abspath(edgebus.__file__))
ROOT = os.path.dirname(PACKAGE)

# Spark's logging for the JVMs these commands start: errors only (no start-up WARN lines).
LOG4J2 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def session(
    master: str | None = None,
    app: str = "edgebus-ingest",
    conf: dict[str, str] | None = None,
    source: bool = True,
) -> SparkSession:
    """A SparkSession for the edgebus commands, with the data source registered.

    Without --master and outside spark-submit it runs on local[*]; under
    spark-submit the master and the rest of the configuration are spark-submit's.
    ``conf``: more settings (the tests and benchmarks use a small local[2]).
    ``source=False`` leaves the data source out, for a session that reads only
    the table: registering one makes Spark start a Python worker to look up
    data sources, and pyspark 4.x may print a BrokenPipeError traceback when
    that idle worker's socket closes at spark.stop()."""
    from pyspark.sql import SparkSession

    from edgebus.ingest.source import register

    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # run by spark-submit
    if master is None and not submitted:
        master = "local[*]"
    if master is not None and master.startswith("local"):
        # Python workers must run this interpreter and import this checkout.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        pp = os.environ.get("PYTHONPATH", "")
        if ROOT not in pp.split(os.pathsep):
            os.environ["PYTHONPATH"] = ROOT + (os.pathsep + pp if pp else "")
    b = SparkSession.builder.appName(app).config("spark.ui.showConsoleProgress", "false")
    # The data source's Python workers talk to the JVM over a unix socket, not
    # TCP loopback: each task's small first messages otherwise wait out
    # Nagle's algorithm and delayed ACKs, about 40 ms a task (pyspark >= 4.1;
    # older versions ignore the setting). On a cluster put it in spark-defaults.
    b = b.config("spark.python.unix.domain.socket.enabled", "true")
    if not submitted and DRIVER_JAVA_OPTIONS not in (conf or {}):
        # The JVM starts here (not under spark-submit): quiet from its first line.
        b = b.config(DRIVER_JAVA_OPTIONS, "-Dlog4j2.configurationFile=file:" + LOG4J2)
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    if master is not None:
        b = b.master(master)
    spark = b.getOrCreate()
    sc = spark.sparkContext
    master = sc.master or ""
    if master.startswith("local") and not sc.getConf().contains("spark.sql.shuffle.partitions"):
        # 200 shuffle (= dedup state) partitions cost seconds per micro-batch on
        # one machine; a checkpoint keeps the number it was created with.
        spark.conf.set("spark.sql.shuffle.partitions", str(max(2, sc.defaultParallelism)))
    for key, value in _SINK_CONF.items():
        if not sc.getConf().contains(key):
            spark.conf.set(key, value)
    if submitted or not master.startswith("local"):
        _ship_code(spark)
    if source:
        register(spark)
    return spark


# The job's defaults (spark-defaults or --conf override them).
_SINK_CONF = {
    # Each batch's sink log file is then the whole listing, which
    # edgebus.ingest.compaction rewrites in one rename; a table keeps the interval it
    # was created with.
    compaction.LOG_INTERVAL_CONF: "1",
    # No extra batch without data just to evict dedup state: the next batch
    # with data evicts it, and --once ends a batch sooner.
    "spark.sql.streaming.noDataMicroBatches.enabled": "false",
}

# A small local session for tests and benchmarks: no UI, few shuffle partitions.
SMALL_LOCAL = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
}


def small_session(app: str) -> SparkSession:
    """local[2] with SMALL_LOCAL settings and quiet logs, format("edgebus") registered."""
    spark = session("local[2]", app=app, conf=SMALL_LOCAL)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _ship_code(spark: SparkSession) -> None:
    """Send edgebus.tlog and edgebus.ingest, all the data source imports, with
    the core modules of edgebus/ they come under, to the executors (spark-submit
    on a cluster needs no --py-files then)."""
    fd, zpath = tempfile.mkstemp(prefix="edgebus-", suffix=".zip")
    os.close(fd)
    with zipfile.ZipFile(zpath, "w") as z:
        for sub in ("", "tlog", "ingest"):
            for dirpath, dirnames, files in os.walk(os.path.join(PACKAGE, sub)):
                # edgebus/'s own modules, not its other parts
                dirnames[:] = [d for d in dirnames if d != "__pycache__"] if sub else []
                for f in files:
                    if f.endswith(".py"):
                        rel = os.path.relpath(os.path.join(dirpath, f), PACKAGE)
                        z.write(os.path.join(dirpath, f), os.path.join("edgebus", rel))
    spark.sparkContext.addPyFile(zpath)
    # Executors fetch it from the driver while the job runs: remove it at exit.
    atexit.register(_unlink, zpath)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
