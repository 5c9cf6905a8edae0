"""The test harness: what every test and dev tool uses to run real parts.

``poll`` waiting for a condition with a deadline (sync and async; portable,
so the MicroPython test runs use it too) · ``process`` a child process in a
session of its own, stopped with a deadline and its whole group killed when
anything fails · ``bridge`` ``edgebus-bridge`` as such a process · ``mqtt``
plain MQTT clients that watch a broker · the broker is ``dev/broker.py``'s
``Mosquitto``.

Why in dev/: the dev tools (the presence figures, the benchmarks, the demo)
run the same brokers, bridges and processes as the tests, and dev/ must not
import tests/. tests/ imports dev/ as it imports the product; nothing
installed imports dev/ (tests/host/project/test_layout.py holds it), and
tests/conftest.py makes pytest fixtures of these parts (``broker``,
``processes``)."""
