# A firmware service for the load test: publishes sensor/load {"i", "t"} at
# "rate" messages/s, paced on the monotonic clock; "t" is the device's wall
# clock in microseconds (on the unix port, the host's clock: latency is
# receive time minus "t").
import asyncio
import time

from edgebus.compat import now


async def start(ctx, opts):
    c = ctx.connect("loadgen")
    period = 1.0 / opts.get("rate", 20)
    t0 = now()
    i = 0
    while True:
        c.publish("sensor/load", {"i": i, "t": time.time_ns() // 1000})
        i += 1
        d = t0 + i * period - now()
        await asyncio.sleep(d if d > 0 else 0)
