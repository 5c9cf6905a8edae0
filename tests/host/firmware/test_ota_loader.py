"""The loader (firmware/loader.py, a device's main.py) under the real
MicroPython unix port and CPython: which bundle a boot runs, the trial's one
boot, the rollback and its reason (docs/protocol.md, "18. Updates").

Each case is a device directory with the loader as main.py, a factory
``firmware`` package at its root and slots under ota/, whose firmware.main
prints which one ran; the end to end updates are tests/host/tools/test_ota_push.py."""

import json
import os
import shutil
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


def device(tmp_path, slots, pointer=None, behaviour=None, config="{}", at_import=None):
    """A device directory: the factory bundle and slots (name -> behaviour of
    main(); at_import: name -> code its firmware/main.py runs when imported),
    each package with the runtime's watchdog simulator (firmware/wdtsim.py)."""
    behaviour = behaviour or {}
    at_import = at_import or {}
    (tmp_path / "main.py").write_bytes(devicefiles.main_py())
    (tmp_path / "config.json").write_text(config)
    for name, where in [("factory", tmp_path)] + [(s, tmp_path / "ota" / s) for s in slots]:
        pkg = where / "firmware"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        shutil.copy(os.path.join(devicefiles.FIRMWARE_DIR, "wdtsim.py"), pkg)
        body = behaviour.get(name, "return 0")
        head = "WHO = %r\n%s\n" % (name, at_import.get(name, ""))
        (pkg / "main.py").write_text(head + MAIN.replace("BODY", body))
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


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_trial_that_hangs_in_its_own_main_module_is_reset_and_rolled_back(tmp_path, runtime):
    """The loader starts the watchdog before the bundle's first import: a
    main module that never returns from its import is reset (the simulator
    kills the process, as a board's watchdog resets the chip) and the next
    boot runs the good bundle, saying why."""
    ptr = {"good": bundle("a", "v2"), "trial": bundle("b", "v3")}
    d = device(
        tmp_path,
        ["a", "b"],
        ptr,
        config='{"watchdog_ms": 1500}',
        at_import={"b": "while True:\n    pass"},
    )
    ran, code, after = boot(d, runtime)
    assert ran is None and code != 0 and (d / "wdtsim.reset").exists()
    assert after["boots"] == 1 and after["trial"]["slot"] == "b"
    ran, code, after = boot(d, runtime)
    assert (ran, code) == ("a", 0)
    assert after["failed"]["reason"] == "hung: the watchdog reset it during its trial (starting)"
    assert after["trial"] is None and after["rollbacks"] == 1


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_trial_bundle_feeds_the_watchdog_the_loader_started(tmp_path, runtime):
    """One watchdog per process, as on a chip: the bundle's WDT (its own copy
    of the simulator) re-times and feeds the loader's, which therefore does
    not reset a bundle that runs past the loader's timeout."""
    feed = (
        "import time\n    from firmware import wdtsim\n    w = wdtsim.WDT(timeout=1500)\n"
        "    for _ in range(8):\n        time.sleep(0.5)\n        w.feed()\n    return 0"
    )
    ptr = {"good": bundle("a", "v2"), "trial": bundle("b", "v3")}
    d = device(tmp_path, ["a", "b"], ptr, config='{"watchdog_ms": 1500}', behaviour={"b": feed})
    ran, code, after = boot(d, runtime)
    assert (ran, code) == ("b", 0) and not (d / "wdtsim.reset").exists()
    assert after["trial"]["slot"] == "b" and "failed" not in after


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_pointer_write_cut_between_remove_and_rename_is_finished(tmp_path, runtime):
    """Where a rename does not replace (FAT) a pointer write removes the old
    pointer, then renames the new one in: a cut between the two leaves only
    the whole temp file, which the loader puts in place and runs by (here the
    loader's own trial-boot count: the next boot rolls back with the reason)."""
    ptr = {"good": bundle("a", "v2"), "trial": bundle("b", "v3"), "boots": 1, "stage": "starting"}
    d = device(tmp_path, ["a", "b"])
    (d / "ota").mkdir(exist_ok=True)
    (d / "ota" / "state.json.tmp").write_text(json.dumps(ptr))
    ran, code, after = boot(d, runtime)
    assert (ran, code) == ("a", 0) and not (d / "ota" / "state.json.tmp").exists()
    assert after["trial"] is None and after["rollbacks"] == 1
    assert after["failed"]["reason"] == "reset during its trial (starting)"


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_pointer_temp_file_cut_short_is_no_pointer(tmp_path, runtime):
    d = device(tmp_path, ["a"])
    (d / "ota").mkdir(exist_ok=True)
    (d / "ota" / "state.json.tmp").write_text('{"good": {"slot": "a"')  # the first write, cut
    assert boot(d, runtime) == ("factory", 0, None)
