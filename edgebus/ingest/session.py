"""The SparkSession the edgebus commands run in: the data source registered,
Python workers that import this edgebus, quiet logs, the job's sink defaults,
and the code shipped to a cluster's executors."""

from __future__ import annotations

import atexit
import os
import re
import shlex
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
    remote: str | None = None,
) -> SparkSession:
    """A SparkSession for the edgebus commands, with the data source registered
    and Spark's logging at ERROR.

    Without --master and outside spark-submit it runs on local[*]; under
    spark-submit the master and the rest of the configuration are spark-submit's.
    ``remote`` (or the SPARK_REMOTE environment variable): a Spark Connect URL
    (``sc://host:port``), the session a client of that server (connect()).
    ``conf``: more settings (the tests and benchmarks use a small local[2]).
    ``source=False`` leaves the data source out, for a session that reads only
    the table: registering one makes Spark start a Python worker to look up
    data sources, and pyspark 4.x may print a BrokenPipeError traceback when
    that idle worker's socket closes at spark.stop()."""
    from pyspark.sql import SparkSession

    from edgebus.ingest.source import register

    remote = remote or os.environ.get("SPARK_REMOTE")
    if remote:
        return connect(remote, conf, source)
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # run by spark-submit
    if master is None and not submitted:
        master = "local[*]"
    if master is not None and master.startswith("local"):
        _local_workers()
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
    _defaults(spark, master, sc.defaultParallelism)
    if submitted or not master.startswith("local"):
        _ship_code(spark)
    if source:
        register(spark)
    sc.setLogLevel("ERROR")
    return spark


def connect(url: str, conf: dict[str, str] | None = None, source: bool = True) -> SparkSession:
    """A Spark Connect session on the server at url (``sc://host:port``), with
    the job's sink defaults and the data source registered. The data source
    runs in the server's Python workers: its PYSPARK_PYTHON must import
    edgebus (docs/spark.md, "Spark Connect")."""
    from pyspark.sql import SparkSession

    from edgebus.ingest.source import register

    spark = SparkSession.builder.remote(url).getOrCreate()
    for key, value in (conf or {}).items():
        spark.conf.set(key, value)
    master = spark.conf.get("spark.master", None) or ""
    cores = re.match(r"local\[(\d+)", master)
    _defaults(spark, master, int(cores.group(1)) if cores else os.cpu_count() or 2)
    if source:
        register(spark)
    return spark


def _local_workers() -> None:
    """Python workers of a local master run this interpreter and import this
    edgebus; and pyspark from its installed copy (compiled once, on disk) when
    it is the one Spark runs: Spark puts its own pyspark.zip first on the
    workers' PYTHONPATH, and Python compiles a module imported from a zip anew
    in every process, 0.5 s more for each worker started (the process serving
    a streaming source's offsets is one per query). A user's own
    PYSPARK_PYTHON (another interpreter) is left alone."""
    pp = os.environ.get("PYTHONPATH", "")
    if ROOT not in pp.split(os.pathsep):
        os.environ["PYTHONPATH"] = ROOT + (os.pathsep + pp if pp else "")
    mine = os.environ.get("PYSPARK_PYTHON", sys.executable)
    if mine in (sys.executable, _LAUNCHER[0]):
        os.environ["PYSPARK_PYTHON"] = worker_python()


# The launcher worker_python() wrote in this process, if any.
_LAUNCHER = [""]


def worker_python() -> str:
    """PYSPARK_PYTHON for Spark's Python workers on this machine: a script
    running this interpreter with this edgebus's directory and the installed
    pyspark's first on its path (_local_workers() says why); this interpreter
    itself when the JVM runs another pyspark (SPARK_HOME elsewhere). One
    script per process, private to this user, removed at exit."""
    import pyspark

    home = os.path.dirname(os.path.abspath(pyspark.__file__))
    spark_home = os.environ.get("SPARK_HOME")
    if spark_home and os.path.realpath(spark_home) != os.path.realpath(home):
        return sys.executable
    if _LAUNCHER[0] and os.path.exists(_LAUNCHER[0]):
        return _LAUNCHER[0]
    first = os.pathsep.join(dict.fromkeys([ROOT, os.path.dirname(home)]))
    script = '#!/bin/sh\nPYTHONPATH=%s"${PYTHONPATH:+%s$PYTHONPATH}" exec %s "$@"\n' % (
        shlex.quote(first),
        os.pathsep,
        shlex.quote(sys.executable),
    )
    fd, path = tempfile.mkstemp(prefix="edgebus-python-", suffix=".sh")
    with os.fdopen(fd, "w") as f:
        f.write(script)
    os.chmod(path, 0o700)
    atexit.register(_unlink, path)
    _LAUNCHER[0] = path
    return path


def _defaults(spark: SparkSession, master: str, cores: int) -> None:
    """The job's settings where the session's configuration has none."""
    unset = [k for k in (_SHUFFLE, *_SINK_CONF) if spark.conf.get(k, None) is None]
    if _SHUFFLE in unset and master.startswith("local"):
        # 200 shuffle (= dedup state) partitions cost seconds per micro-batch on
        # one machine; a checkpoint keeps the number it was created with.
        spark.conf.set(_SHUFFLE, str(max(2, cores)))
    for key in unset:
        if key in _SINK_CONF:
            spark.conf.set(key, _SINK_CONF[key])


_SHUFFLE = "spark.sql.shuffle.partitions"

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
    return session("local[2]", app=app, conf=SMALL_LOCAL)


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
