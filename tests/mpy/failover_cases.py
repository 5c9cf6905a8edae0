# The uplink's failover rules (firmware/failover.py) and their config checks
# (firmware/config.py): plain test_* functions run both by pytest
# (tests/host/firmware/test_failover.py) and by tests/mpy/run.py under MicroPython.
from firmware import ConfigError
from firmware.config import validate
from firmware.failover import Failover, gateways

U = {
    "kind": "mqtt",
    "host": "a",
    "port": 1883,
    "prefix": "p",
    "gateways": [{"name": "A"}, {"host": "b", "port": 1884, "name": "B"}],
}


def _cfg(u):
    return {"node": "d", "uplink": u}


def _refused(u, words):
    try:
        validate(_cfg(u))
    except ConfigError as e:
        assert words in str(e), str(e)
        return
    raise AssertionError("accepted: %r" % (u,))


def test_gateways_overlay_the_uplink_keys():
    g = gateways(U)
    assert [x["host"] for x in g] == ["a", "b"]
    assert [x["port"] for x in g] == [1883, 1884]
    assert g[1]["prefix"] == "p" and "gateways" not in g[1]
    # one gateway config (no list): the uplink itself, as before failover
    one = {"kind": "mqtt", "host": "a"}
    assert gateways(one) == [one]


def test_single_gateway_never_moves():
    f = Failover(gateways({"kind": "uart", "port": "/dev/x"}), 3.0, t=0.0)
    assert not f.silent(1000.0)
    assert not f.probe_due(1000.0)
    assert f.names == ["/dev/x"]


def test_silence_is_no_frame_for_the_period_then_the_next_gateway():
    f = Failover(gateways(U), 3.0, t=0.0)
    assert f.names == ["A", "B"]
    f.heard(5, 1.0)  # frames_in moved: heard at 1.0
    f.heard(5, 3.9)  # unchanged: still heard at 1.0
    assert not f.silent(3.9)
    assert f.silent(4.0)
    assert f.move(4.0)["host"] == "b" and f.i == 1 and f.moves == 1
    assert f.last_move == "A -> B: silent"
    assert not f.silent(6.9)  # the new gateway gets a whole period
    assert f.silent(7.0)
    f.move(7.0)  # after the last, the first again
    assert f.i == 0 and f.moves == 2 and f.failbacks == 0


def test_failback_probes_the_primary_only_when_away_and_due():
    f = Failover(gateways(U), 3.0, failback=True, probe_every=10.0, t=0.0)
    assert not f.probe_due(100.0)  # on the primary: nothing to probe
    f.move(100.0)
    assert not f.probe_due(109.0)
    assert f.probe_due(110.0) and f.probes == 1
    assert not f.probe_due(110.5)  # one probe per period
    assert not f.probed(False) and f.probe_failures == 1
    assert f.probe_due(120.5)
    assert f.probed(True)
    f.move(121.0, 0, "failback")
    assert f.i == 0 and f.failbacks == 1 and f.moves == 2
    assert f.last_move == "B -> A: failback"
    s = f.stats()
    assert s["gateway"] == "A" and s["moves"] == 2 and s["failbacks"] == 1


def test_no_failback_when_off():
    f = Failover(gateways(U), 3.0, failback=False, probe_every=1.0, t=0.0)
    f.move(0.0)
    assert not f.probe_due(1000.0)
    assert f.move(1.0, 1)["host"] == "b" and f.moves == 1  # to where it is: no move


def test_config_accepts_gateways_and_refuses_bad_ones():
    validate(_cfg(dict(U)))
    validate(
        _cfg(
            {
                "kind": "mqtt",
                "gateways": [{"host": "a"}, {"host": "b"}],
                "failover_after": 2,
                "failback": False,
                "probe_every": 5,
            }
        )
    )
    validate(_cfg({"kind": "uart", "gateways": [{"port": "/dev/a"}, {"port": 2, "baud": 9600}]}))
    _refused({"kind": "mqtt", "gateways": [{"host": "a"}, {"port": 1}]}, "uplink.host is required")
    _refused(
        {"kind": "mqtt", "host": "a", "gateways": [{"hots": "b"}]},
        "unknown key uplink.gateways[0].hots",
    )
    _refused(
        {"kind": "mqtt", "host": "a", "gateways": [{"port": "x", "name": 3}]},
        "uplink.gateways[0].name must be str",
    )
    _refused({"kind": "mqtt", "host": "a", "gateways": ["b"]}, "entries must be objects")
    _refused({"kind": "mqtt", "host": "a", "failover_after": 0}, "failover_after")
    _refused({"kind": "mqtt", "host": "a", "failback": 1}, "failback must be bool")
