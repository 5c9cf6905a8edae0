#!/usr/bin/env bash
# edgebus developer entry point: ./do setup | demo | test | check | bench | soak [args]
# Every command sets up what it needs first (idempotent), so on a fresh
# machine with Python 3.11 and apt, `./do demo` and `./do test` just work.
set -euo pipefail
cd "$(dirname "$0")"
VENV=${EDGEBUS_VENV:-.venv}
PY="$VENV/bin/python"

# apt_install WHAT PACKAGE...: as root, or with sudo; else say what to install.
apt_install() {
    what=$1; shift
    sudo=""
    if [ "$(id -u)" != 0 ]; then
        if ! command -v sudo >/dev/null 2>&1; then
            echo "note: $what is not installed and cannot be installed without root: apt-get install $*" >&2
            return 0
        fi
        sudo=sudo
    fi
    if ! { $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; }; then
        echo "note: installing $what failed: apt-get install $*" >&2
    fi
}

setup() {
    if [ ! -x "$PY" ]; then
        python3 -m venv "$VENV"
    fi
    # Reinstall only when the dependency list changed.
    stamp="$VENV/.edgebus-deps"
    want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        "$PY" -m pip install -q --upgrade pip
        # The versions the suite last passed with (constraints.txt).
        "$PY" -m pip install -q -e ".[dev]" -c constraints.txt
        echo "$want" > "$stamp"
    fi
    if ! command -v mosquitto >/dev/null 2>&1 && [ ! -x /usr/sbin/mosquitto ]; then
        apt_install "mosquitto" mosquitto
    fi
    # A local NTP server for the time step's test (tests/host/mqtt/test_mqtt_ntp.py).
    if ! command -v chronyd >/dev/null 2>&1 && [ ! -x /usr/sbin/chronyd ]; then
        apt_install "chrony" --no-install-recommends chrony
    fi
    # promtool and Prometheus: the /metrics lint, the alert rules' unit tests and
    # a real Prometheus scraping a bridge (tests/host/bridge/test_prometheus.py).
    if ! command -v promtool >/dev/null 2>&1 || [ ! -x /usr/bin/prometheus ]; then
        apt_install "prometheus" --no-install-recommends prometheus
    fi
    # Headless Chromium: the bridge's fleet page loaded in a real browser
    # (tests/host/bridge/test_fleet_page.py).
    if ! command -v chromium >/dev/null 2>&1; then
        apt_install "chromium" chromium
    fi
    # The emulated board (boards/qemu-mps2-an385): its firmware is built with
    # the Arm toolchain and booted in QEMU (tests/host/board/test_qemu_board.py).
    if ! command -v arm-none-eabi-gcc >/dev/null 2>&1 || ! command -v qemu-system-arm >/dev/null 2>&1 \
            || [ "$(arm-none-eabi-gcc -print-file-name=libc.a 2>/dev/null)" = libc.a ]; then
        apt_install "the emulated board's toolchain" --no-install-recommends gcc-arm-none-eabi \
            libnewlib-arm-none-eabi qemu-system-arm make
    fi
    # A C compiler and Python's headers: the compiled core (setup.py,
    # EDGEBUS_COMPILE=1; tests/host/core/test_compiled.py and the core benchmark).
    if ! command -v cc >/dev/null 2>&1 || ! "$PY" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
        apt_install "a C compiler and Python's headers" --no-install-recommends gcc libc6-dev python3-dev
    fi
    export PATH="$PWD/$VENV/bin:$PATH"
    # The MicroPython source beside the checkout, where boards' micropython-lib
    # packages (tools/boardkit/mpylib.py) and the emulated board's firmware come from.
    src="$PWD/../shared/micropython/micropython-1.28.0.tar.xz"
    if [ -z "${EDGEBUS_MICROPYTHON:-}" ] && [ -f "$src" ]; then
        export EDGEBUS_MICROPYTHON="$src"
    fi
}

cmd=${1:-help}
[ $# -gt 0 ] && shift
case "$cmd" in
    setup) setup ;;
    demo)
        setup
        "$PY" -m dev.demo "$@"
        ;;
    test)
        setup
        # Bytecode caches on, whatever the shell says: with
        # PYTHONDONTWRITEBYTECODE set (as on this project's machines) pytest
        # rewrites every test module's asserts again in each xdist worker and
        # every Python a test starts compiles its imports anew: collecting the
        # fast loop took 8.5 s per process instead of 2.2.
        unset PYTHONDONTWRITEBYTECODE
        # With pytest arguments (e.g. -m "not slow", the fast loop) only those
        # tests run; the full run (CI) also smoke-tests every benchmark.
        if [ $# -eq 0 ]; then
            # The full run (CI): two pytest-xdist workers per core, as most
            # tests spend their time waiting on the parts they start (a broker,
            # MicroPython, a JVM, qemu): on 2 cores the suite took 14.9 min on
            # 2 workers, 12.1 on 3, 11.6 on 4. The tests on one Spark session,
            # and the emulated board's, keep to one worker each (groups:
            # tests/conftest.py). The slowest tests named, then a smoke run of
            # every benchmark.
            workers=${EDGEBUS_TEST_WORKERS:-$(($(nproc) * 2))}
            "$PY" -m pytest -n "$workers" --dist loadgroup --durations=30
            "$PY" -m dev.bench --smoke
        else
            "$PY" -m pytest "$@"
        fi
        ;;
    check)
        setup
        # The gates CI runs before the tests: lint (with a cap on each function's
        # branches), formatting, spelling, and type checks on the host packages.
        "$VENV/bin/ruff" check .
        "$VENV/bin/ruff" format --check .
        "$VENV/bin/codespell"
        "$PY" -m mypy
        # The core's typed stubs (typings/edgebus/*.pyi) against its code.
        "$PY" -m mypy.stubtest --mypy-config-file pyproject.toml --concise --ignore-missing-stub \
            edgebus.bus edgebus.conn edgebus.errors edgebus.feed edgebus.request edgebus.values \
            edgebus.view
        ;;
    bench)
        setup
        "$PY" -m dev.bench "$@"
        ;;
    soak)
        setup
        "$PY" -m dev.soak "$@"
        ;;
    *)
        echo "usage: ./do setup | demo [--seconds N] | test [pytest args, e.g. -m "not slow"] | check | bench [--smoke] | soak [--short]"
        exit 2
        ;;
esac
