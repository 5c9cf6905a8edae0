# Micro-benchmark of the link framing (edgebus/link/frame.py): encode and
# stream-decode throughput for 8, 64 and 512-byte bodies.
#
# Runs as it is on both runtimes, from anywhere:
#   python3 dev/bench/frame_bench.py [seconds per figure, default 0.5]
#   micropython dev/bench/frame_bench.py [seconds]
# (or with edgebus as .mpy: python3 -m dev.mpyrun --heap 256K dev/bench/frame_bench.py)
#
# encode  - encode(body), frames/s
# decode  - FrameReader.feed() on the encoded stream in 512-byte chunks
#           (as a UART or socket read would deliver it), frames/s
# both    - a frame encoded and decoded again: frames/s and MB/s of body bytes
# Each figure is the best of 3 timed runs of about `seconds` (machines are
# noisy).  On MicroPython the GC runs every 32 KB allocated (gc.threshold),
# as on a board with a small heap: its allocator slows down as garbage piles
# up in a large heap (the unix port's default is 2 MB), which would otherwise
# dominate these figures.
import sys

# The repository root (two levels up from this script) on the import path;
# MicroPython has no os.path, so plain string handling.
_here = sys.path[0] if sys.path and sys.path[0] else "."
sys.path.insert(0, _here + "/../..")

import gc  # noqa: E402

from edgebus.link.frame import FrameReader, encode  # noqa: E402

MICROPYTHON = sys.implementation.name == "micropython"
if MICROPYTHON:
    from time import ticks_diff, ticks_us

    def clock():
        return ticks_us()

    def elapsed(t0):
        return ticks_diff(ticks_us(), t0) / 1e6
else:
    from time import perf_counter as clock

    def elapsed(t0):
        return clock() - t0


SIZES = (8, 64, 512)
CHUNK = 512


def body_of(n):
    b = bytearray(n)
    for i in range(n):
        b[i] = (i * 37 + 11) & 0xFF  # includes 0x00 bytes every 256
    return bytes(b)


def rate(fn, seconds, runs=3):
    """Calls of fn() per second: the best of `runs` runs of about `seconds`."""
    fn()  # warm up
    n = 1
    while True:  # calibrate n
        t0 = clock()
        for _ in range(n):
            fn()
        dt = elapsed(t0)
        if dt >= seconds / 4:
            break
        n *= 2
    n = int(n * seconds / dt) + 1
    best = 0
    for _ in range(runs):
        t0 = clock()
        for _ in range(n):
            fn()
        best = max(best, n / elapsed(t0))
    return best


def bench(size, seconds):
    body = body_of(size)
    frame = encode(body)
    # A stream of whole frames, fed in CHUNK-byte reads; k frames per pass.
    k = max(1, 4096 // len(frame))
    stream = frame * k
    reader = FrameReader()

    def enc():
        encode(body)

    def dec():
        for i in range(0, len(stream), CHUNK):
            reader.feed(stream[i : i + CHUNK])

    e = rate(enc, seconds)
    d = rate(dec, seconds) * k
    assert reader.frames > 0 and reader.crc_errors == 0 and reader.cobs_errors == 0
    both = 1 / (1 / e + 1 / d)
    return e, d, both, both * size / 1e6


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 0.5
    impl = sys.implementation
    if MICROPYTHON:
        gc.threshold(32 * 1024)
    print("edgebus frame bench on %s %s" % (impl.name, ".".join(str(x) for x in impl.version[:3])))
    print("%6s %12s %12s %12s %9s" % ("body", "encode f/s", "decode f/s", "both f/s", "both MB/s"))
    for size in SIZES:
        gc.collect()
        e, d, both, mbs = bench(size, seconds)
        print("%6d %12.0f %12.0f %12.0f %9.3f" % (size, e, d, both, mbs))


main()
