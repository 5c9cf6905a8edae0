"""The core's speed and heap on the emulated 32-bit board (MPS2-AN385,
Cortex-M3, MicroPython 1.28, edgebus frozen): dev/bench/core_mpy_script.py
with "board" run over the board's REPL with mpremote, as on the unix port.

QEMU is not the chip: it runs with an instruction-counting clock (ICOUNT), so
its msgs/s are per instructions executed, not per cycles of a real
Cortex-M3; the figure to read is edgebus over naive within one run.
"""

import json
import os
import subprocess
import tempfile
import time

from dev import qemuheap
from edgebus.tools.boardkit import boards, executables, firmware
from edgebus.tools.sim import qemuboard

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "core_mpy_script.py")


# QEMU's clock counts instructions, 2**5 ns each (~31 M a second, near the
# AN385's 25 MHz Cortex-M3 at one a cycle), not the host's time: the runs are
# deterministic (runs agree within 1-2 %; on the host's clock, with the
# machine shared, the 1-subscriber ratio of one build spread 0.23-0.54).
ICOUNT_SHIFT = 5
ICOUNT = ["-icount", "shift=%d" % ICOUNT_SHIFT]


def _script(d, smoke):
    """The unix port's script with its argv set first (mpremote run passes none)."""
    path = os.path.join(d, "core_board.py")
    with open(SCRIPT) as f:
        text = f.read()
    argv = ["board"] + (["smoke"] if smoke else [])
    with open(path, "w") as f:
        f.write("import sys\nsys.argv.extend(%r)\n" % argv + text)
    return path


def figures(smoke=False, src=None):
    """{"runs": [the script's JSON per run], "heap", "icount_shift",
    "seconds" (the part's wall time, the build's included)}, or {"error"} saying why not. The smoke
    run takes the firmware only if it is built already (the board's tests
    build it), so it never waits for a build."""
    t0 = time.monotonic()
    board = boards.load_board(qemuheap.BOARD)
    src = src or os.environ.get(firmware.ENV_SOURCE) or qemuheap.TARBALL
    try:
        meta = firmware.build(board, src, log=lambda *a: None, only_cached=smoke)
    except Exception as e:  # no toolchain or source: the unix port's figures stand
        return {"error": "%s: %s" % (type(e).__name__, e)}
    if meta is None:
        return {"error": "not in a smoke run without a built firmware"}
    runs = []
    with tempfile.TemporaryDirectory() as d:
        script = _script(d, smoke)
        state = os.path.join(d, "board")
        qemuboard.prepare_flash(board, state, qemuboard.device_files(board, None, main=None))
        with qemuboard.QemuBoard(
            board, meta["image"], state, repl="pty", uart="null", extra=ICOUNT
        ) as qb:
            qb.start()
            for _ in range(1 if smoke else 3):  # each run after mpremote's soft reset
                r = subprocess.run(
                    executables.command("mpremote") + ["connect", qb.repl_port, "run", script],
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                lines = r.stdout.strip().splitlines()
                if r.returncode != 0 or not lines or not lines[-1].startswith("{"):
                    raise RuntimeError("the board's run failed:\n" + r.stdout + r.stderr)
                runs.append(json.loads(lines[-1]))
    return {
        "runs": runs,
        "heap": meta["heap"],
        "icount_shift": ICOUNT_SHIFT,
        "seconds": time.monotonic() - t0,
    }


if __name__ == "__main__":
    import sys

    print(json.dumps(figures("--smoke" in sys.argv), indent=1))
