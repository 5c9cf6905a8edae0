"""The loader (firmware/loader.py, a device's main.py) under the real
MicroPython unix port and CPython: which bundle a boot runs, the trial's one
boot, the rollback and its reason (docs/protocol.md, "18. Updates").

Each case is a device directory with the loader as main.py, a factory
``firmware`` package at its root and slots under ota/, whose firmware.main
prints which one ran; the end to end updates are tests/host/tools/test_ota_push.py."""

import json
import subprocess
import sys

import pytest

from edgebus.tools.boardkit import devicefiles, mpybuild

RUNTIMES = [
    pytest.param("micropython", marks=pytest.mark.micropython),
    pytest.param("cpython"),
]

MAIN = """
import sys
error = None
def main(config_path, board=None):
    global error
    print("RAN " + WHO)
    BODY
"""


def device(tmp_path, slots, pointer=None, behaviour=None):
    """A device directory: the factory bundle and slots (name -> behaviour)."""
    behaviour = behaviour or {}
    (tmp_path / "main.py").write_bytes(devicefiles.main_py())
    (tmp_path / "config.json").write_text("{}")
    for name, where in [("factory", tmp_path)] + [(s, tmp_path / "ota" / s) for s in slots]:
        pkg = where / "firmware"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        body = behaviour.get(name, "return 0")
        (pkg / "main.py").write_text(("WHO = %r\n" % name) + MAIN.replace("BODY", body))
    if pointer is not None:
        (tmp_path / "ota" / "state.json").write_text(json.dumps(pointer))
    return tmp_path


def boot(d, runtime):
    """Run the loader once: (which bundle ran, exit status, the pointer after)."""
    exe = mpybuild.micropython() if runtime == "micropython" else sys.executable
    r = subprocess.run(
        [exe, "main.py", "config.json"], cwd=d, capture_output=True, text=True, timeout=60
    )
    ran = [ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("RAN ")]
    p = d / "ota" / "state.json"
    try:
        after = json.loads(p.read_text())
    except (OSError, ValueError):
        after = None  # none, or damaged
    return (ran[0] if ran else None), r.returncode, after


def bundle(slot, version):
    return {"slot": slot, "version": version, "hash": version * 8}


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_no_pointer_runs_the_factory_modules(tmp_path, runtime):
    assert boot(device(tmp_path, ["a"]), runtime) == ("factory", 0, None)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_good_slot_runs_ahead_of_the_factory_modules(tmp_path, runtime):
    ptr = {"good": bundle("a", "v2"), "trial": None}
    ran, code, after = boot(device(tmp_path, ["a", "b"], ptr), runtime)
    assert (ran, code, after) == ("a", 0, ptr)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_trial_boots_once_then_the_good_bundle_with_the_reason(tmp_path, runtime):
    ptr = {"good": bundle("a", "v2"), "trial": bundle("b", "v3"), "boots": 0}
    d = device(tmp_path, ["a", "b"], ptr)
    ran, code, after = boot(d, runtime)
    assert (ran, code) == ("b", 0)
    assert after["boots"] == 1 and after["stage"] == "starting" and after["trial"]["slot"] == "b"
    # The trial boot ended without a commit (here: it returned): back to a.
    ran, code, after = boot(d, runtime)
    assert ran == "a"
    assert after["trial"] is None and after["good"]["slot"] == "a" and after["rollbacks"] == 1
    assert after["failed"] == {
        "version": "v3",
        "hash": "v3" * 8,
        "reason": "reset during its trial (starting)",
    }
    assert "boots" not in after and "stage" not in after


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_trial_that_crashes_at_start_reboots_and_reports_why(tmp_path, runtime):
    ptr = {"good": None, "trial": bundle("a", "v2"), "boots": 0}
    d = device(tmp_path, ["a"], ptr, {"a": 'raise RuntimeError("boom at start")'})
    ran, code, after = boot(d, runtime)
    assert ran == "a" and code == 3  # the reboot (unix port, CPython: exit 3)
    assert after["reason"] == "crash at start: RuntimeError: boom at start"
    ran, code, after = boot(d, runtime)
    assert (ran, code) == ("factory", 0)  # good is null: the factory modules
    assert after["failed"]["reason"] == "crash at start: RuntimeError: boom at start"


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_trial_whose_config_is_refused_rolls_back_with_the_error(tmp_path, runtime):
    ptr = {"good": bundle("a", "v2"), "trial": bundle("b", "v3"), "boots": 0}
    refuse = 'error = "config error: services.0 is not known"\n    return 2'
    d = device(tmp_path, ["a", "b"], ptr, {"b": refuse})
    assert boot(d, runtime)[:2] == ("b", 3)
    ran, code, after = boot(d, runtime)
    assert ran == "a" and after["failed"]["reason"] == "config error: services.0 is not known"


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_damaged_pointer_runs_the_factory_modules(tmp_path, runtime):
    d = device(tmp_path, ["a"])
    (d / "ota").mkdir(exist_ok=True)
    (d / "ota" / "state.json").write_text('{"good": {"slot": "a"')  # cut short
    assert boot(d, runtime) == ("factory", 0, None)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_trial_the_watchdog_reset_is_reported_hung(tmp_path, runtime):
    ptr = {"good": bundle("a", "v2"), "trial": bundle("b", "v3"), "boots": 1, "stage": "session"}
    d = device(tmp_path, ["a", "b"], ptr)
    (d / "wdtsim.reset").write_text("wdt\n")  # the simulated watchdog's reset cause
    ran, _code, after = boot(d, runtime)
    assert ran == "a" and not (d / "wdtsim.reset").exists()
    assert after["failed"]["reason"] == "hung: the watchdog reset it during its trial (session)"
