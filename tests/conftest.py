import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from dev.broker import Mosquitto  # noqa: E402
from dev.harness.poll import until, wait_until  # noqa: E402,F401 (the tests' polling)
from dev.harness.process import processes  # noqa: E402
from edgebus.tools.boardkit import devicefiles, mpybuild, mpylib  # noqa: E402

# A device imports its runtime as `firmware`: from edgebus/device/, where the
# files are, not through the checkout's top-level link (one path per file).
# Imported here, so that the package and its submodules keep that path
# whatever pytest later puts first on sys.path.
devicefiles.firmware("config")

# The MicroPython source beside the checkout: the emulated board's firmware is
# built from it, and bundles take the micropython-lib packages boards require
# from it (tools/boardkit/mpylib.py), unless $EDGEBUS_MICROPYTHON names another.
TARBALL = os.path.join(os.path.dirname(ROOT), "shared", "micropython", "micropython-1.28.0.tar.xz")
if os.path.exists(TARBALL):
    os.environ.setdefault(mpylib.ENV_SOURCE, TARBALL)


# Spark's JVMs in the tests run short jobs on small data: the client compiler
# alone and the serial collector start and run them ~18% faster on 2 cores
# (tests/host/spark/test_spark_{audit,report}.py: 110 s, 91 s with these). Set
# here, every JVM the tests start inherits them: the shared session's, each
# `edgebus ingest`'s, the Spark Connect server's, the cluster's master and
# worker. A job that runs for long would want the optimising compiler back.
TEST_JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:CICompilerCount=1"
os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_JVM_OPTS)
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", TEST_JVM_OPTS)


@pytest.fixture(scope="session")
def mpy_tree(tmp_path_factory):
    """A directory holding edgebus/ and tests/portable/ compiled to .mpy and
    the MicroPython test runner, as a board would hold them."""
    out = str(tmp_path_factory.mktemp("mpy"))
    mpybuild.compile_tree(ROOT, ["edgebus"], out)
    compile_portable_tests(out)
    shutil.copy(os.path.join(ROOT, "tests", "mpy", "run.py"), out)
    return out


def compile_portable_tests(out):
    """tests/portable/ compiled to .mpy under out, with what they import beside
    the core: tests/__init__ and the polling helper (dev/harness/poll.py). The
    helper's packages' __init__ are left out (MicroPython imports them as
    namespace packages), as the link tests' heaps have little to spare."""
    mpybuild.compile_tree(ROOT, [os.path.join("tests", "portable")], out)
    for mod in ("tests/__init__", "dev/harness/poll"):
        mpybuild.compile_file(
            os.path.join(ROOT, *mod.split("/")) + ".py", os.path.join(out, *mod.split("/")) + ".mpy"
        )


def edgebus_ok(*args, timeout=120):
    """The edgebus command of this checkout run to its end: its stdout (exit 0
    asserted, its stderr shown otherwise)."""
    from dev.harness.process import env, run_module

    r = run_module("edgebus.tools.cli", *args, timeout=timeout, env=env())
    assert r.returncode == 0, r.stderr
    return r.stdout


def run_micropython(tree, args, heap="64K", timeout=120):
    """Run the real micropython binary in tree; returns CompletedProcess."""
    return subprocess.run(
        [mpybuild.micropython(), "-X", "heapsize=" + heap] + list(args),
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def broker():
    """A real mosquitto on a free loopback port (dev/broker.py), stopped after the test."""
    with Mosquitto() as b:
        yield b


def mpy_script(mpy_tree, path):
    """A generator for fixtures running a test device script under the real
    micropython binary: yields start(args, heap) -> Popen, killed at teardown.
    The script is copied into mpy_tree beside tests/mpy/devkit.py."""
    for src in (path, os.path.join(ROOT, "tests", "mpy", "devkit.py")):
        shutil.copy(src, mpy_tree)
    # Run as a module (-m): a script's folder would go first on sys.path as
    # an absolute path, and what fits in a heap would hang on pytest's tmp path.
    module = os.path.basename(path)[:-3]
    for start in processes():
        yield lambda args, heap: start(
            [mpybuild.micropython(), "-X", "heapsize=" + heap, "-m", module] + args, mpy_tree
        )


# The heap of a link_device holding a 12 KB spool (LINK_DEVICE_SPOOL=12288):
# its .mpy code is on the heap too, and at 192K the uplink's 1 KB read buffer
# found no block once the code's layout moved; 224K leaves room for that.
SPOOLED_DEVICE_HEAP = "224K"


@pytest.fixture
def link_device(mpy_tree):
    """Start tests/mpy/link_device.py under the real micropython binary:
    link_device(uplink, key, count, node=None, heap="192K") -> Popen. Killed at
    the end of the test."""
    for start in mpy_script(mpy_tree, os.path.join(ROOT, "tests", "mpy", "link_device.py")):
        yield lambda uplink, key, count, node=None, heap="192K": start(
            [uplink, key, str(count)] + ([node] if node else []), heap
        )


# Markers: what a test needs besides CPython, so that `-m "not slow"` is a quick
# loop and `-m "not spark"` etc. leave out a part that is not installed. They are
# applied below, so a new test is marked without anyone remembering to: from the
# fixtures it uses (directly or through other fixtures), from its folder, and
# from an explicit mark in the test module where a test starts a part in its own
# body (a Mosquitto() or a Fleet in a `with`, micropython in a subprocess).
MARKERS = {
    "spark": "starts a local Spark (pyspark and a JVM)",
    "mosquitto": "starts a real mosquitto broker",
    "micropython": "runs the real micropython binary (the unix port)",
    "qemu": "builds the emulated board's firmware (cached) and boots it in qemu-system-arm",
    "prometheus": "runs promtool or a real Prometheus (Debian's prometheus package)",
    "reliability": "tests/reliability: faults, bad input, load and security with real parts",
    "slow": "takes more than about a second; every spark, mosquitto, micropython, "
    "prometheus, reliability and qemu test is slow too",
}
SERVICES = ("spark", "mosquitto", "micropython", "prometheus", "reliability", "qemu")

# Fixtures that start a real part, by name (not by the module that implements
# them, which may move): every test using one gets the marker.
FIXTURE_MARKERS = {
    "spark": "spark",  # a local SparkSession (tests/host/spark/sparkkit.py)
    "cluster": "spark",  # a Spark standalone master and worker (test_spark_cluster.py)
    "broker": "mosquitto",  # a mosquitto on a free port (the test broker)
    "mpy_tree": "micropython",  # the .mpy tree the binary runs (above)
    "link_device": "micropython",  # tests/mpy/link_device.py under micropython (above)
    "rel_device": "micropython",  # tests/reliability/rel_device.py under micropython
    "fw_tree": "micropython",  # firmware/ compiled for micropython (test_firmware.py)
    "sim": "micropython",  # a micropython REPL on a pty (test_deploy.py, SimBoard)
    "image": "qemu",  # the emulated board's firmware (tests/host/board/qemukit.py)
}
# Module-scoped fixtures that take over a second to set up: their users are slow.
SLOW_FIXTURES = (
    "unix_bundle",  # the unix board's bundle (test_build.py)
    "bundles",  # three boards' bundles (test_deploy.py)
)
RELIABILITY_DIR = os.path.join(ROOT, "tests", "reliability")

# Under pytest-xdist (`./do test`, --dist loadgroup) the tests of one group
# run on one worker, one after the other: every test on the shared Spark
# session (one JVM, not one per worker) and every test of the emulated board
# (one build of its firmware into the shared cache). So that no group is the
# suite's longest chain, the Spark tests of each folder are a group of their
# own (a session per folder: tests/host/spark, tests/host/e2e), and the
# standalone cluster's test (four JVMs of its own, the longest test) another.
# The first fixture listed that a test uses names its group.
XDIST_GROUPS = {"cluster": "spark-cluster", "spark": "spark"}
# Module-scoped fixtures that take seconds to set up (a venv with edgebus
# installed, a hostile fleet's run, bundles, a bridge with its peers): the
# tests of a module using one run on one worker, which sets it up once.
MODULE_GROUPED = (
    "installed",
    "run",
    "mqtt",
    "peer",
    "mqtt_enc",
    "peer_enc",
    "unix_bundle",
    "bundles",
    "fw_tree",
    "stack",
)


def pytest_configure(config):
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", "%s: %s" % (name, text))
    # Set below for pytest-xdist; declared here too, so that a run without it
    # (-p no:xdist) passes --strict-markers.
    config.addinivalue_line("markers", "xdist_group(name): run on one xdist worker")


@pytest.hookimpl(tryfirst=True)  # before -m deselects anything
def pytest_collection_modifyitems(config, items):
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for fixture, marker in FIXTURE_MARKERS.items():
            if fixture in used:
                item.add_marker(marker)
        if os.path.commonpath([str(item.path), RELIABILITY_DIR]) == RELIABILITY_DIR:
            item.add_marker("reliability")
        if any(item.get_closest_marker(m) for m in SERVICES) or used.intersection(SLOW_FIXTURES):
            item.add_marker("slow")
        group = next((g for f, g in XDIST_GROUPS.items() if f in used), None)
        if group == "spark":
            group = "spark-" + item.path.parent.name
        if group is None and used.intersection(MODULE_GROUPED):
            group = item.path.stem
        if item.get_closest_marker("qemu"):
            group = "qemu"
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_collection_finish(session):
    """Under --dist loadgroup, refuse to run when pytest-xdist did not carry the
    groups into the node ids (pytest 9.2 with xdist 3.8 silently drops them:
    pytest-dev/pytest-xdist#1386), rather than run every group on every worker."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    lost = [
        i.nodeid
        for i in session.items
        if i.get_closest_marker("xdist_group") and "@" not in i.nodeid
    ]
    if lost:
        raise pytest.UsageError(
            "pytest-xdist lost the xdist_group of %d tests (e.g. %s): this pytest and "
            "pytest-xdist do not group; install the versions in constraints.txt"
            % (len(lost), lost[0])
        )


def pytest_addoption(parser):
    parser.addoption(
        "--soak",
        action="store_true",
        default=False,
        help="run tests/reliability in its long form (also: EDGEBUS_SOAK=1); "
        "python -m dev.soak runs it and writes RELIABILITY.md",
    )
