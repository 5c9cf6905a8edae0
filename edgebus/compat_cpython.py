"""CPython-only pieces of edgebus.compat (never imported on MicroPython)."""

import asyncio


# CPython 3.11's wait_for swallows a cancellation that arrives in the turn its
# awaitable completes (gh-86296): a `while True: await wait_for(...)` loop then
# never ends and whoever awaits its cancellation hangs (the bridge's shutdown
# did, under load). asyncio.timeout, what 3.12's wait_for is built on, keeps
# the cancellation.
async def wait_for(aw, timeout):
    """asyncio.wait_for without the lost-cancellation race (CPython 3.11)."""
    if timeout is None:
        return await aw
    async with asyncio.timeout(timeout):
        return await aw
