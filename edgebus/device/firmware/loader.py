"""The device's start: which bundle this boot runs, then firmware.main.

A board's main.py is this file's source (edgebus build writes it there: run
as main.py, it imports no ``firmware`` package before choosing the bundle),
and the unix port's fleet runs it the same way, ``micropython main.py
config.json`` in the device's directory. It reads
the update pointer, ``ota/state.json`` beside the config (firmware/README.md,
"Updates over the bus"), and puts the chosen slot's directory first on
sys.path, ahead of the filesystem root and the frozen modules; with no
pointer the factory modules (frozen, or installed at the root) run.

A bundle on trial boots once: the loader counts the boot in the pointer
before the bundle's code runs, so a trial boot that ends in any way but the
bundle's own commit (a crash at import, a config error, a hang the watchdog
resets, a power cut) makes the next boot go back to the good bundle, with the
failed version and why recorded for the good bundle to report. The loader
starts the trial's watchdog before it imports anything of the bundle, so a
bundle that hangs in its own main module is reset too.

This module is the factory's, never a slot's: it runs before a slot is
chosen, so it imports nothing a bundle brings (its own pointer write, not
firmware.write_atomic, for that reason) and forgets the factory ``firmware``
package before importing the chosen one.
"""

import json
import os
import sys

DIR = "ota"
STATE = "state.json"
WDT_MARK = "wdtsim.reset"  # firmware/wdtsim.py: the simulated watchdog's reset cause
# The watchdog a boot on trial runs from before the bundle's first import
# (firmware.main's TRIAL_WDT_MS, unless the config sets watchdog_ms): the
# bundle's own main module may be what hangs, so it cannot be what arms it.
TRIAL_WDT_MS = 30000


def _write(path, st):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(st))
    try:
        os.rename(tmp, path)
    except OSError:  # filesystems whose rename does not replace (FAT)
        os.remove(path)
        os.rename(tmp, path)


def choose(base=""):
    """The bundle this boot runs: ({"slot", "version", "hash"} or None for the
    factory modules, the pointer or None). base: the config's directory."""
    path = base + DIR + "/" + STATE
    wdt = _watchdog_reset(base)  # read at every boot: the mark is this boot's
    try:
        with open(path) as f:
            st = json.load(f)
    except OSError:
        st = _unfinished(path)
        if st is None:
            return None, None
    except ValueError:
        return None, None
    t = st.get("trial")
    if t:
        if st.get("boots"):
            # The trial boot ended without a commit: back to the good bundle.
            why = "reset during its trial (%s)" % st.get("stage", "starting")
            if wdt:
                why = "hung: the watchdog reset it during its trial (%s)" % st.get("stage")
            st["failed"] = {
                "version": t.get("version"),
                "hash": t.get("hash"),
                "reason": st.get("reason") or why,
            }
            st["trial"] = None
            st["rollbacks"] = st.get("rollbacks", 0) + 1
            for k in ("boots", "stage", "reason"):
                st.pop(k, None)
        else:
            st["boots"] = 1
            st["stage"] = "starting"
        _write(path, st)
    return st.get("trial") or st.get("good"), st


def _unfinished(path):
    """The pointer in path + ".tmp", put in place. Where rename does not
    replace (FAT), _write and firmware.write_atomic remove the old pointer
    before renaming the new one in: a cut between the two leaves only the
    new one, whole. None when there is none, or it is cut short (the first
    pointer's write: there was none before)."""
    try:
        with open(path + ".tmp") as f:
            st = json.load(f)
        os.rename(path + ".tmp", path)
        return st
    except (OSError, ValueError):
        return None


def _watchdog_reset(base):
    """Did the watchdog reset the device? machine.reset_cause() on a board;
    the simulator's mark (firmware/wdtsim.py) where there is none."""
    try:
        import machine

        return machine.reset_cause() == machine.WDT_RESET
    except (ImportError, AttributeError):
        pass
    try:
        os.remove(base + WDT_MARK)
        return True
    except OSError:
        return False


def note(base, reason):
    """Record why a trial boot fails (the next boot's rollback reports it)."""
    path = base + DIR + "/" + STATE
    try:
        with open(path) as f:
            st = json.load(f)
        if st.get("trial") and not st.get("reason"):
            st["reason"] = reason
            _write(path, st)
    except (OSError, ValueError):
        pass  # no pointer: nothing on trial


def arm(config_path):
    """Start the watchdog for a boot on trial, before anything of the trial
    bundle is imported: machine.WDT, else the factory's simulator
    (firmware.wdtsim, one per process as a chip has one, which the bundle's
    main module then feeds and re-times). None where the runtime has neither
    a WDT nor threads (the emulated MPS2-AN385): a hang there is not reset."""
    ms = TRIAL_WDT_MS
    try:
        with open(config_path) as f:
            ms = json.load(f).get("watchdog_ms") or ms
    except (OSError, ValueError, AttributeError):
        pass  # the bundle's main says what is wrong with the config
    try:
        import machine

        return machine.WDT(timeout=ms)
    except (ImportError, AttributeError):
        pass
    try:
        from firmware import wdtsim  # the factory's: the slot is not on the path yet

        return wdtsim.WDT(timeout=ms)
    except ImportError:  # no _thread
        return None


def _forget():
    for name in list(sys.modules):
        if name == "firmware" or name.startswith("firmware."):
            del sys.modules[name]


def reboot():
    """A board resets; the unix port and CPython exit 3 for the supervisor."""
    try:
        import machine

        machine.reset()
    except (ImportError, AttributeError):
        pass
    sys.exit(3)


def run(config_path="config.json", board=None):
    """Choose the bundle, run the device; returns main()'s exit status."""
    d = config_path.rpartition("/")[0]
    base = d + "/" if d else ""
    cur, st = choose(base)
    trial = bool(st and st.get("trial"))
    if trial:
        arm(config_path)
    if cur and cur.get("slot"):
        sys.path.insert(0, base + DIR + "/" + cur["slot"])
    _forget()
    try:
        import firmware.main

        code = firmware.main.main(config_path, board)
        why = firmware.main.error
    except Exception as e:  # a bundle that cannot start: its trial fails
        if not trial:
            raise
        code = 1
        why = "crash at start: %s: %s" % (type(e).__name__, e)
    if trial and code not in (0, 3):
        note(base, why or "exit status %s" % code)
        reboot()
    return code


if __name__ == "__main__" or sys.platform not in ("linux", "darwin", "win32"):
    # main.py on a board (this file, or "import firmware.loader"), or the
    # unix port's script: run the device. On a board a bad config returns
    # here and the board falls to its REPL with the message.
    _code = run(*sys.argv[1:3])
    if sys.platform in ("linux", "darwin", "win32"):
        sys.exit(_code)
