"""Example sensor service: sensor/temp every "period" s (default 5).

SIMULATED: the reading is a deterministic sine of a counter (21 +- 3 degC), on
every runtime. For a real sensor replace read() (e.g. machine.ADC, a 1-wire
DS18B20); copy this module to add a service of your own.
Config: {"module": "temp", "period": 5, "topic": "sensor/temp"}
"""

import asyncio
import math


def read(n):
    return round(21.0 + 3.0 * math.sin(n / 10), 2)


async def start(ctx, opts):
    c = ctx.connect("temp")
    topic = opts.get("topic", "sensor/temp")
    n = 0
    while True:
        c.publish(topic, {"c": read(n), "n": n, "simulated": True})
        n += 1
        await asyncio.sleep(opts.get("period", 5))
