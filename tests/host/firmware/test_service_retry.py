"""A device service's request that finds the heap full is tried again before
it fails (firmware/services/sysconfig.py): on a small board a full heap is
often brief (frames in flight), and sys/config/set loads the validator."""

import asyncio

from edgebus import Bus
from firmware.services import sysconfig


class Counts:
    """The firmware context's counter (ctx.count), all a service's loop uses."""

    def __init__(self):
        self.counters = {}

    def count(self, k):
        self.counters[k] = self.counters.get(k, 0) + 1


def _ask(full):
    """A request to a handler that finds the heap full ``full`` times: (what
    the caller got, the tries, the counters)."""

    async def main():
        ctx, tries = Counts(), []

        def handler(ctx, req):
            tries.append(1)
            if len(tries) <= full:
                raise MemoryError("memory allocation failed, allocating 464 bytes")
            req.reply("done")

        c = Bus().connect()
        task = asyncio.create_task(sysconfig.serve(ctx, c.bind("sys/t", queue_len=2), handler))
        try:
            got = await c.call("sys/t", None, timeout=5)
        except Exception as e:
            got = e
        task.cancel()
        return got, len(tries), ctx.counters

    return asyncio.run(main())


def test_a_full_heap_is_tried_again_and_then_fails_with_why():
    assert _ask(0) == ("done", 1, {})
    assert _ask(2) == ("done", 3, {})  # answered, nothing counted
    got, tries, counted = _ask(3)
    assert "config service: MemoryError: memory allocation failed" in str(got), got
    assert tries == 3 and counted == {"service_errors": 1}
