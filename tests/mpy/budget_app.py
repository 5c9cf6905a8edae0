# A device-sized workload for the 64 KB budget check (tests/test_mpy_budget.py):
# the core plus what a small sensor node holds at once. Prints the heap left.
import asyncio
import gc

import edgebus

# Retained views load on first use; an app that makes one imports them with
# its other imports (docs/api.md): from .mpy on the heap, a module loaded
# mid-run needs one free block of its size, which a tight heap may not have.
import edgebus.view  # noqa: F401

bus = edgebus.Bus(q_length=4)
app = bus.connect(principal="app")
subs = [app.subscribe(("sensor", i, "+"), queue_len=4) for i in range(8)]
watch = app.watch_retained("cfg/#", queue_len=4, replay=True)
view = app.retained_view("sys/#")
for i in range(8):
    app.retain(("cfg", i), i)
app.retain("sys/info", {"fw": "1.0", "board": "unix"})
ep = app.bind("sys/config/get", queue_len=2)


async def handler():
    async for req in ep:
        req.reply({"ok": True, "q": req.payload})


async def main():
    t = asyncio.create_task(handler())
    n = 0
    for r in range(50):
        for i in range(8):
            app.publish(("sensor", i, "temp"), r)
        for s in subs:
            while s.recv_nowait() is not None:
                n += 1
        assert (await app.call("sys/config/get", r)) == {"ok": True, "q": r}
    ep.unbind()
    await t
    return n


delivered = asyncio.run(main())
assert delivered == 400, delivered
assert view.get("sys/info").payload["fw"] == "1.0"
gc.collect()
print("OK delivered=%d free=%d alloc=%d" % (delivered, gc.mem_free(), gc.mem_alloc()))
