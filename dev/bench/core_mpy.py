"""Core figures on the real MicroPython unix port, from the .mpy bundle."""

import json
import os

from dev import devheap, mpyrun
from dev.bench import core_board
from edgebus.tools.sim.fleet import DEVICE_HEAP

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "core_mpy_script.py")


# The unix port's mpy arch: the core's functions marked native as
# machine code, as a board with an arch runs them.
NATIVE = "x64"


def run(smoke=False, heap="1M", fleet=False, arch=None):
    args = (["smoke"] if smoke else []) + (["fleet"] if fleet else [])
    r = mpyrun.run(SCRIPT, args, heap=heap, arch=arch, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError("MicroPython benchmark failed:\n" + r.stdout + r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


def figures(smoke=False):
    """Heap figures (deterministic) and speeds (repeated) plus the largest set
    of subscriptions that fits in a 64 KB heap; "board": the same speed runs
    on the emulated 32-bit board (dev/bench/core_board.py)."""
    # The script bounds GC work with gc.threshold, so the heap size only
    # needs to be large enough; per-item memory deltas do not depend on it.
    runs, native = [], []
    for _ in range(1 if smoke else 3):  # interleaved: the machine's load hits both alike
        runs.append(run(smoke, heap="512K"))
        native.append(run(smoke, heap="512K", arch=NATIVE))
    fleet = run(smoke, heap="64K", fleet=True)
    return {
        "runs": runs,
        "native_runs": native,
        "max_subscriptions_q8_in_64K": fleet["max_subscriptions_q8"],
        "import_core_in_64K": fleet["import_core"],
        "device": device_runtime(smoke),
        "board": core_board.figures(smoke),
    }


def device_runtime(smoke=False):
    """The full device runtime's heap (dev/devheap.py): code share, data at
    READY, and (full run) the smallest -X heapsize it runs its workload in."""
    tree = devheap.bundle()
    code = devheap.code_heap(tree)
    # The heap the fleet's devices get: the smoke run must not fail where they run.
    r = devheap.run(tree, DEVICE_HEAP, 0.5 if smoke else 2.0)
    if not r["ok"]:
        raise RuntimeError("the device runtime failed in %s:\n%s" % (DEVICE_HEAP, r["output"]))
    smallest = (
        None if smoke else devheap.smallest_heap(tree, lo=64, hi=int(DEVICE_HEAP.rstrip("K")))
    )
    return {
        "code": code,
        "data_at_ready": r["data"],
        "alloc_at_ready": r["ready_alloc"],
        "smallest_heap_kb": smallest,
    }
