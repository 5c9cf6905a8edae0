"""edgebus in one page: publish facts, retain current truth, observe retained
truth, call owned actions. Runs unchanged on CPython and MicroPython."""

import asyncio

import edgebus


async def thermostat(conn):
    """A service owning the 'heater/set' action."""
    ep = conn.bind("heater/set")
    async for req in ep:
        if not isinstance(req.payload, (int, float)) or not 5 <= req.payload <= 30:
            req.fail("setpoint must be a number from 5 to 30")
            continue
        conn.retain("heater/setpoint", req.payload)
        req.reply("ok")


async def main():
    bus = edgebus.Bus(q_length=8)
    with bus.connect(principal="app") as app, bus.connect(principal="heater") as svc:
        asyncio.create_task(thermostat(svc))
        await asyncio.sleep(0)

        # Publish facts: subscribers get them with bus-owned provenance.
        sub = app.subscribe("sensor/+/temp")
        svc.publish("sensor/kitchen/temp", 21.5)
        msg = await sub.recv()
        print(
            "fact:",
            "/".join(msg.topic),
            msg.payload,
            "from",
            msg.origin.conn_id,
            "principal",
            msg.origin.principal,
        )

        # Retain current truth, observe it with a view.
        view = app.retained_view("heater/#")
        print("call heater/set 19 ->", await app.call("heater/set", 19, timeout=1.0))
        try:
            await app.call("heater/set", 99)
        except edgebus.Failed as e:
            print("call heater/set 99 -> failed:", e.reason)
        print("view version", view.version, [(m.topic, m.payload) for m in view.snapshot()])

        # Bounded: a slow consumer loses the oldest, the publisher never waits.
        slow = app.subscribe("burst/#", queue_len=4)
        for i in range(10):
            svc.publish("burst/n", i)
        got = []
        while True:
            m = slow.recv_nowait()
            if m is None:
                break
            got.append(m.payload)
        print("slow consumer kept", got, "dropped", slow.dropped())
    print("bus after scope:", bus.stats()["connections"], "connections")


asyncio.run(main())
