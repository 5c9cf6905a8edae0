"""python -m dev.soak [--short] [--out RELIABILITY.md]

Runs the reliability suite (tests/reliability) in its long form (--soak),
plus the existing tests that cover the other cases of issues #7 and #13, then writes
RELIABILITY.md from what was measured: each case, the test that covers it,
how many times it was tried, whether it held, and its figures. --short runs
the CI form instead (the figures then say so)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
R = "tests/reliability/"

# Existing tests that cover a case of the issue (run by the soak as they are).
EXISTING = [
    "tests/host/spark/test_spark_ingest.py::test_exactly_once_across_sigkill_with_duplicates_and_corruption",
    "tests/host/tlog/test_tlog.py::test_crash_with_sigkill_recovers",
    "tests/host/tlog/test_tlog.py::test_random_damage_never_raises_or_yields_a_wrong_record",
    "tests/host/mqtt/test_mqtt.py::test_broker_restart_mid_stream_no_duplicates_losses_are_gaps",
    "tests/host/bridge/test_bridge.py::test_unix_socket_credentials_reach_the_authoriser",
    "tests/host/bridge/test_bridge.py::test_device_restart_bumps_generation_persisted_across_bridge_restart",
    "tests/host/link/test_link_pty.py::test_wrong_key_over_pty_gives_no_session",
    "tests/host/e2e/test_e2e_fleet_spark.py",
    "tests/host/firmware/test_flash_spool.py",
    "tests/host/mqtt/test_mqtt_presence.py",
    "tests/host/bridge/test_bridge.py::test_group_commit_survives_sigkill_and_restart_resumes_from_the_log",
    "tests/host/bridge/test_bridge.py::test_bridge_sigkilled_mid_stream_loses_and_doubles_nothing",
    "tests/portable/test_link_spool.py",
    "tests/portable/test_link_journal.py",
    "tests/portable/test_spool.py",
    "tests/host/link/test_frame_fuzz.py",
    "tests/host/link/test_link_properties.py",
    "tests/portable/test_link_data.py",
    "tests/portable/test_link_state.py",
    "tests/portable/test_link_call_limits.py",
    "tests/portable/test_queue_policies.py",
    "tests/portable/test_frame.py",
    "tests/host/e2e/test_e2e_failover.py",
    "tests/host/firmware/test_failover_serial.py",
    "tests/portable/test_link_relay.py",
    "tests/host/bridge/test_peers.py",
    "tests/host/tools/test_fleet.py::test_a_device_gives_up_on_a_broker_that_never_answers_and_comes_back",
    "tests/portable/test_mqtt_deadlines.py",
    "tests/host/bridge/test_bridge_stop.py",
    "tests/portable/test_link_seal.py",
    "tests/host/bridge/test_shell.py::test_another_user_gets_only_what_an_acl_entry_grants",
]

# The outsider trial's checks (issue 24), each run on both transports: [mqtt], [peer].
OUTSIDER = [R + "test_rel_outsider.py::test_" + t for t in (
    "each_frame_is_refused_counted_and_the_session_stays_up",
    "no_call_of_the_outsiders_is_served",
    "every_genuine_reading_arrives_once_in_order_and_none_of_the_outsiders",
    "every_frame_after_the_handshake_is_tagged",
    "edgebus_status_counts_the_refused_frames_among_the_errors")]
# Its encrypted run at the defaults, on both transports: [mqtt_enc], [peer_enc].
OUTSIDER_ENC = [R + "test_rel_outsider.py::test_at_the_defaults_" + t for t in (
    "no_frame_after_the_handshake_is_readable", "the_genuine_call_and_readings_go_through",
    "blind_forgeries_and_a_replay_are_refused_and_counted")]

# (section, case, what is checked, tests: node-id prefixes, figures case name or None)
CASES = [
    ("Faults", "MQTT broker killed (SIGKILL) and restarted mid-stream, repeatedly",
     "real mosquitto; a MicroPython device at 100 msg/s (64 KB spool); delivered = sent: every "
     "message once, in order, no gap; same generation; bridge reconnects each time",
     [R + "test_rel_faults.py::test_broker_killed_and_restarted_repeatedly",
      "tests/host/mqtt/test_mqtt.py::test_broker_restart",
      "tests/host/mqtt/test_mqtt_presence.py::test_firmware_device_follows"],
     "fault: MQTT broker killed and restarted"),
    ("Faults", "Serial link cut and restored; pty closed and reopened (unplug/replug)",
     "real ptys (tools/ptycable.py), the relay drops bytes for 0.3-2 s (some cuts outlast "
     "liveness); the host tty vanishes and returns under a new path; delivered = sent, once, "
     "in order, no gap", [R + "test_rel_faults.py::test_serial_line_cut"],
     "fault: serial line cut/restored and pty closed/reopened"),
    ("Faults", "Serial line with injected noise",
     "about 1 byte in 5000 flipped on the line; frame errors counted and the damaged frames "
     "sent again (RESEND); no damaged payload delivered; delivered = sent, no gap", [R + "test_rel_faults.py::test_serial_line_with_noise",
                                           "tests/host/link/test_link_properties.py"],
     "fault: serial line with injected noise"),
    ("Faults", "Device process killed and restarted",
     "new session id -> generation + 1; the old boot's retained facts removed on the host; "
     "3 calls pending at the kill fail with session_reset (none hangs)",
     [R + "test_rel_faults.py::test_device_killed_and_restarted",
      "tests/host/bridge/test_bridge.py::test_device_restart"], "fault: device killed and restarted"),
    ("Faults", "Bridge SIGKILLed during log appends and restarted",
     "bridge in its own process at 200 msg/s, killed at random instants, once with a device "
     "reboot between kills; records synced before a kill survive, the log reads clean, nothing "
     "logged twice; each boot's numbers run from 1 without a hole (what the killed bridge had "
     "not made durable comes again from the device's spool); generations never go back",
     [R + "test_rel_faults.py::test_bridge_sigkilled", "tests/host/tlog/test_tlog.py::test_crash",
      "tests/host/bridge/test_bridge.py::test_group_commit_survives_sigkill",
      "tests/host/bridge/test_bridge.py::test_bridge_sigkilled_mid_stream"],
     "fault: bridge SIGKILLed during log appends"),
    ("Faults", "Broker, then bridge, then both SIGKILLed in one run; checked in Spark",
     "3 real-firmware devices over MQTT at 20 readings/s, the bridge as a process writing its "
     "log; outages of 3, 2 and 2 s; then `edgebus ingest`: in the table every sequence number "
     "of every boot exactly once, no hole, no duplicate, one generation; the outages' readings "
     "flagged late with their own device time",
     ["tests/host/e2e/test_e2e_fleet_spark.py"], None),
    ("Faults", "Device rebooted during a broker outage, flash spool on",
     "the earlier boot's unacknowledged readings kept in the flash journal arrive after the "
     "reboot under their own peer_sid and seq, flagged late, none lost",
     ["tests/host/firmware/test_flash_spool.py", "tests/portable/test_link_journal.py"], None),
    ("Faults", "Broker outage of 80 % of the documented window at 20 readings/s",
     "an `edgebus fleet` device (real firmware, the unix board's manifest: its RAM spool, no "
     "flash journal) through 80 % of the seconds BENCHMARKS.md section 3 gives that spool "
     "without a broker: every number once, no gap, nothing evicted",
     [R + "test_rel_faults.py::test_a_fleet_device_loses_nothing_through_80_percent"],
     "fault: broker outage of 80% of the unix board's window"),
    ("Faults", "Outage longer than the spool",
     "real firmware, 4 KB spool, broker down longer than it holds: exactly the overflow is "
     "missing, one run of numbers, counted as a gap by the bridge and as evicted by the "
     "device; nothing else lost",
     [R + "test_rel_faults.py::test_outage_longer_than_the_spool",
      "tests/portable/test_link_spool.py::test_outage_longer"],
     "fault: outage longer than the spool"),
    ("Faults", "Peer without the acknowledgement capability",
     "a peer of the previous protocol links and behaves as before: what waited is dropped and "
     "counted as a gap, nothing is resent",
     ["tests/portable/test_link_spool.py::test_peer_without"], None),
    ("Faults", "Primary gateway (its bridge, then its broker) SIGKILLed: failover and back",
     "two mosquittos and two bridge processes with their own logs; real-firmware devices at 20 "
     "readings/s move to the backup on heartbeat silence and fail back by probe; one device on "
     "two serial lines too; ingest of both logs: every sequence number once per device boot",
     ["tests/host/e2e/test_e2e_failover.py", "tests/host/firmware/test_failover_serial.py"], None),
    ("Faults", "A relayed route vanishes mid-call; a gateway behind a site host restarts",
     "three buses: the last link cut mid-call fails the call at once (session_reset), the route "
     "is withdrawn hop by hop; a site bridge loses and regains a gateway's device routes",
     ["tests/portable/test_link_relay.py::test_a_route_that_vanishes",
      "tests/host/bridge/test_peers.py::test_a_site_host"], None),
    ("Faults", "A broker that accepts TCP and never answers (no CONNACK)",
     "a stand-in broker on the device's port takes the connection and stays silent: a real "
     "firmware device gives up within its `connect_timeout` (the error in its log) and tries "
     "again, several times; a real mosquitto then on that port: the session comes up and the "
     "readings taken meanwhile arrive from the spool, no gap. The transport alone (CPython and "
     "MicroPython): no CONNACK, and a broker silent after it, each end the connection within "
     "the deadline; one that answers its PINGREQs keeps it",
     ["tests/host/tools/test_fleet.py::test_a_device_gives_up_on_a_broker_that_never_answers",
      "tests/portable/test_mqtt_deadlines.py"], None),
    ("Faults", "Bridge stopped (SIGTERM) at fleet size with sessions up",
     "a bridge process with 2,000 configured MQTT devices, 20 CPython devices (dev/swarm.py) "
     "with sessions and readings flowing: it exits 0 with its state saved (each device's boot "
     "and at least all it acknowledged); every acknowledged reading is in the log; started "
     "again, it takes the rest from the devices' spools: every reading once, no gap",
     ["tests/host/bridge/test_bridge_stop.py"], None),
    ("Faults", "Spark job killed and restarted from its checkpoint",
     "SIGKILL of the JVM and Python mid-batch, restart from the checkpoint: each record exactly "
     "once in the table (existing test, run by the soak)",
     ["tests/host/spark/test_spark_ingest.py::test_exactly_once"], None),
    ("Faults", "Slow consumers on the host bus",
     "publishers never block; drops counted per feed (drop_oldest, reject_newest, retained "
     "watch); memory bounded (tracemalloc)",
     [R + "test_rel_pressure.py::test_slow_consumers", "tests/portable/test_queue_policies.py"],
     "fault: slow consumers on the host bus"),
    ("Faults", "Slow link: device publishes faster than its line drains",
     "out-queue overflow spends sequence numbers: host gaps = device dropped_out",
     [R + "test_rel_pressure.py::test_slow_link"], "fault: slow link (device out queue overflow)"),
    ("Faults", "The bridge's log slower than its devices (overload, issue 23)",
     "a slow log (each sync sleeps 5-40 ms, a queue of 8-48 messages) under a burst from 2-5 "
     "devices, half of it spooled: for every device, acknowledged ⊆ logged and every reading "
     "logged or still in its spool, nothing dropped, all delivered in the end; devices paced "
     "by their windows send nothing twice and are never held back, devices without windows "
     "are held back (pushback); a record the log cannot hold is refused to its device, never "
     "acknowledged as written; the bridge warns and its status says so",
     [R + "test_rel_log_overload.py"], None),
    ("Faults", "Device wall clock jumps back and forward",
     "-1 h, +1 day, -1 year mid-stream: delivery and log order follow seq; no gap, no duplicate",
     [R + "test_rel_pressure.py::test_device_clock"],
     "fault: device wall clock jumps (-1 h, +1 day, -1 year)"),
    ("Bad input", "Fuzzing the frame decoder (Hypothesis + atheris)",
     "arbitrary bytes in arbitrary chunks: no exception, CRC-checked bodies only, fixed buffer",
     [R + "test_rel_fuzz.py::test_frame", R + "test_rel_fuzz.py::test_atheris[frame]",
      "tests/host/link/test_frame_fuzz.py"], "fuzz: atheris frame"),
    ("Bad input", "Fuzzing the link session (Hypothesis + atheris)",
     "arbitrary and protocol-shaped bodies into a live session: no exception, everything "
     "delivered under the device's prefix with the link's provenance, state within bounds",
     [R + "test_rel_fuzz.py::test_session", R + "test_rel_fuzz.py::test_atheris[session]"],
     "fuzz: atheris session"),
    ("Bad input", "Fuzzing a damaged line (Hypothesis + atheris)",
     "valid frames with up to 3 bit flips each: only sent messages delivered, once, in order",
     [R + "test_rel_fuzz.py::test_damaged", R + "test_rel_fuzz.py::test_atheris[line]"],
     "fuzz: atheris line"),
    ("Bad input", "Session memory under fuzzing",
     "one session fed mutated bodies without rebuilds: traced memory growth bounded",
     [R + "test_rel_fuzz.py::test_session_memory"], "fuzz: session memory"),
    ("Bad input", "Oversized frames and payloads, invalid UTF-8, deep/huge JSON, unknown types, "
     "wrong version, wildcard topics, malformed shapes",
     "each: a counter (bad_frames, refused, unknown_type, oversize, ...), a clear last_error, no "
     "crash, the session stays up and the next message crosses",
     [R + "test_rel_badinput.py", R + "test_rel_bridge_input.py", "tests/portable/test_frame.py"],
     None),
    ("Security", "Wrong key never gets a session",
     "rogue over a pty to the bridge; MicroPython device over MQTT; pty link",
     [R + "test_rel_security.py::test_replayed", R + "test_rel_security.py::test_wrong_key",
      "tests/host/link/test_link_pty.py::test_wrong_key"], None),
    ("Security", "A bridge peer with the wrong key gets no session",
     "two bridges over TCP ([[peer]]): neither side has a session, the dialling side says why",
     ["tests/host/bridge/test_peers.py::test_a_peer_with_the_wrong_key"], None),
    ("Security", "Replayed handshake refused",
     "recorded HELLO/AUTH replayed byte for byte (ERROR replay); old AUTH in a new handshake "
     "(auth_failed); no data without a session",
     [R + "test_rel_security.py::test_replayed",
      "tests/portable/test_link_state.py::test_replayed_hello"], None),
    ("Security", "No forged provenance; nothing outside the mapped prefix",
     "link_id, peer_node, peer_sid, generation, kind, principal and seq in a device's extra "
     "change nothing; '../' and list topics stay under dev/<node>/; wildcard topics and routes "
     "refused", [R + "test_rel_security.py::test_device_cannot", R + "test_rel_security.py::test_sync",
                 "tests/portable/test_link_data.py::test_remote_cannot"], None),
    ("Security", "Forged, replayed and foreign frames refused in a sealed session",
     "a flipped tag bit, a replayed frame, a frame sealed in another session, unsealed or "
     "foreign ACK/RESEND/SKIP/BYE/ERROR/PUB: each refused and counted (forged, replayed), the "
     "session up, nothing delivered or freed; an unsealed ERROR only makes the initiator ask",
     ["tests/portable/test_link_seal.py::test_a_flipped",
      "tests/portable/test_link_seal.py::test_forged", "tests/portable/test_link_seal.py::test_an_unsealed"],
     None),
    ("Security", "An outsider on the broker gets no call, reading, ACK or BYE acted on",
     "a paho client with no key on the broker of a real `edgebus fleet` device and the bridge, "
     "knowing only `edgebus.link.frame` and `wire`. Sealed with `mac` at both ends, so it reads "
     "every frame and forges from them: on `down` CALL sys/config/get and sys/reboot, ACK and "
     "SKIP for a high number, RESEND, BYE, ERROR; on `up` PUBs with the next sequence numbers "
     "and the same controls; each bare and COBS-framed, without a seal and with a random "
     "12-byte one, and a captured genuine frame replayed byte for byte: no reply, no reboot, "
     "the session up (`sessions`, `session_ends`), every reading once in order (`gaps`, "
     "`duplicates`, `resends`, `retransmitted` unchanged), none of its readings on the host "
     "bus; the bridge and the device count each (`forged`, `replayed`, in the bridge's status "
     "and ERRS, the device's sys/health and `last_error`); every frame after the handshake "
     "tagged. At the defaults (encrypted): no topic or payload readable after the handshake, "
     "the genuine call and readings go through, a CALL forged from the documented shape and a "
     "replayed frame each refused and counted, nothing answered",
     [t + "[mqtt]" for t in OUTSIDER] + [t + "[mqtt_enc]" for t in OUTSIDER_ENC]
     + [R + "test_rel_outsider.py::test_the_fleet_device"],
     None),
    ("Security", "A man in the middle of a [[peer]] link gets nothing acted on",
     "two bridges over TCP through the outsider's relay: the same frames (a CALL to a gateway "
     "endpoint, next-sequence PUBs, ACK, SKIP, RESEND, BYE, ERROR, bare and with a random "
     "seal; a captured frame replayed) put between genuine frames both ways: no call served, "
     "both sessions up (`sessions`), readings both ways once in order (`gaps`, `duplicates`, "
     "`resends` unchanged), none of its readings on either bus; each side counts what it got "
     "(`forged`, `replayed`, in its status and ERRS); every frame after the handshake tagged "
     "(both bridges `seal = \"mac\"`, so the relay reads all). At the defaults (encrypted): "
     "nothing readable, the call and readings go through, a forged CALL and a replay refused "
     "and counted",
     [t + "[peer]" for t in OUTSIDER] + [t + "[peer_enc]" for t in OUTSIDER_ENC], None),
    ("Security", "The seal is negotiated and cannot be stripped",
     "an old (unsealed) peer links unless the other side requires the seal (seal_refused); "
     "seal removed from HELLO or HELLO_ACK on the way: no session (downgrades, auth_failures)",
     ["tests/portable/test_link_seal.py::test_an_old_peer",
      "tests/portable/test_link_seal.py::test_a_seal_stripped"], None),
    ("Security", "Local-only topics never cross a link",
     "link/# and local/# never exported, whatever the rules",
     ["tests/portable/test_link_data.py::test_local_only"], None),
    ("Security", "Unix-socket clients scoped by their credentials",
     "uid/gid/pid from SO_PEERCRED are the principal the ACL authoriser sees",
     ["tests/host/bridge/test_bridge.py::test_unix_socket"], None),
    ("Security", "Another local user gets only what an [[acl]] entry grants",
     "uid 65534 through the socket's text mode: with no entry, pub/sub/call are refused "
     "(`denied`, counted in the bridge's `denied`) and nothing reaches a device's topics; with "
     "one, exactly what it grants; root and the bridge's own user need none",
     ["tests/host/bridge/test_shell.py::test_another_user"], None),
    ("Security", "The bridge binds only where configured",
     "listening sockets read from /proc: the configured unix socket, and TCP only for metrics "
     "on the configured address", [R + "test_rel_security.py::test_bridge_listens"], None),
    ("Load", "50 MicroPython devices over MQTT at 20 msg/s each",
     "edgebus fleet devices (real firmware) -> mosquitto -> bridge process -> telemetry log; "
     "zero gaps/drops/duplicates/seq holes asserted, RSS flat asserted (generous)",
     [R + "test_rel_load.py"], "load: 50 MicroPython devices over MQTT at 20 msg/s"),
    ("Load", "Start-up storm: devices started at the same instant",
     "300 (CI) or 1,000 (soak) CPython devices (dev/swarm.py) at 1 reading/s, all started at "
     "once against one bridge process with its log, over a real mosquitto: every device gets "
     "a session and only one (the bridge's links: as many sessions as devices, no session "
     "ended, no liveness timeout; each device one session); every reading in the log once, "
     "none acknowledged and missing (dev/swarm.check)",
     [R + "test_rel_storm.py"], "load: devices started at once (start-up storm)"),
]


def _outcomes(junit):
    out = {}
    for tc in ET.parse(junit).getroot().iter("testcase"):
        path = tc.get("classname", "").replace(".", "/")
        nodeid = "%s.py::%s" % (path, tc.get("name"))
        bad = tc.find("failure") is not None or tc.find("error") is not None
        skip = tc.find("skipped")
        # junit says "skipped" for an expected failure too (pytest.mark.xfail)
        out[nodeid] = ("failed" if bad else "passed" if skip is None else
                       "xfailed" if skip.get("type") == "pytest.xfail" else "skipped",
                       float(tc.get("time", 0)))
    return out


def _fmt(v):
    if isinstance(v, float):
        return "%g" % v
    if isinstance(v, list) and len(v) > 14:
        return "[" + ", ".join(map(_fmt, v[:14])) + ", ...]"
    return json.dumps(v) if isinstance(v, (list, dict)) else str(v)


def render(outcomes, figures, soak, wall, cmd, when=None):
    L = ["# Reliability", "",
         "Issues #7 and #13: faults, bad input, security and load, with real parts (mosquitto on a free "
         "loopback port, MicroPython device processes, ptys, the bridge as its own process). "
         "Written by `python -m dev.soak` from the %s run of %s (%s, %.0f s wall on %d cores); "
         "`pytest` runs the same suite in its short CI form (`tests/reliability/`)."
         % ("long (--soak)" if soak else "short (CI)", time.strftime("%Y-%m-%d %H:%M UTC",
                                                                    time.gmtime(when)),
            "`%s`" % cmd, wall, os.cpu_count()), "",
         "**held** means every test listed for the case passed in this run, but for expected "
         "failures (xfail: a known gap the test names), which the column counts. Figures are "
         "measured, not asserted (assertions are on loss, duplication, order, counters and "
         "generous memory bounds, never on speed).", ""]
    section = None
    for sec, case, what, tests, fig in CASES:
        if sec != section:
            L += ([""] if section else []) + ["## " + sec, "", "| case | what is checked | tests | tried | held |",
                  "|---|---|---|---|---|"]
            section = sec
        ran = {k: v for k, v in outcomes.items() if any(k.startswith(t) for t in tests)}
        skipped = sum(1 for v in ran.values() if v[0] == "skipped")
        xfailed = sum(1 for v in ran.values() if v[0] == "xfailed")
        held = any(v[0] == "passed" for v in ran.values()) and \
            all(v[0] in ("passed", "skipped", "xfailed") for v in ran.values())
        tried = []
        for f in figures:
            if fig and f["case"] == fig:
                tried.append(str(f["tried"]))
        if not tried:
            tried = ["%d test(s)" % len(ran)]
        L.append("| %s | %s | %s | %s | %s |" % (
            case, what, "<br>".join("`%s`" % t for t in tests), ", ".join(tried),
            ("**held**" + (" (%d skipped)" % skipped if skipped else "")
             + (" (%d expected failure%s: xfail)" % (xfailed, "s" if xfailed > 1 else "")
                if xfailed else "")) if held
            else ("NOT RUN" if not ran or skipped == len(ran) else "**FAILED**")))
    atheris = any(f["case"].startswith("fuzz: atheris") for f in figures)
    L += ["", ("Fuzzing: the *tried* column counts atheris runs (coverage guided, "
               "`python -m tests.reliability.fuzz_main`); on top of them the Hypothesis tests "
               "in `test_rel_fuzz.py` generate %s inputs (frame, session, line).") if atheris
          else ("Fuzzing: atheris was not installed for this run (`pip install atheris`), so "
                "its coverage-guided tests were skipped; the Hypothesis tests in "
                "`test_rel_fuzz.py` ran, generating %s inputs (frame, session, line).")
          % ("20,000 / 15,000 / 10,000" if soak else "300 / 300 / 200"),
          "", "## Figures", ""]
    for f in figures:
        skip = ("kind", "case", "test", "soak")
        L.append("- **%s** (`%s`): " % (f["case"], f["test"]) + ", ".join(
            "%s %s" % (k, _fmt(v)) for k, v in f.items() if k not in skip))
    L += ["", "## Reading the figures", "",
          "- *Delivered = sent*: the link acknowledges what the bridge has made durable "
          "(docs/protocol.md section 14). While a line, broker or bridge is down, a device "
          "keeps its readings, encoded, in a bounded RAM spool and sends them again, in order, "
          "on the next session; the receiver drops what it already has. The fault cases assert "
          "every message once, in order, no gap, for outages within the spool's window. Beyond "
          "it the configured policy evicts (drop-oldest by default) and every loss still spends "
          "its sequence number, so it is a counted gap, never silent (the overflow case).",
          "- *How long a window*: the default RAM spools hold about 10 s of 20 readings/s "
          "(BENCHMARKS.md); the tests size the spool for their rate (the 100 and 200 msg/s "
          "devices take 64 KB). The optional flash journal keeps the unacknowledged through a "
          "device reboot.",
          "- *Recovery*: outage -> session-up is measured per fault: the broker case in its "
          "test (a restart after 0.2-1 s down), the serial unplug from the replug, and the "
          "bridge and broker SIGKILLed and started again at once with the real firmware's "
          "default heartbeat (`dev/presence.py`). A device no longer waits out its liveness "
          "timeout: the bridge's retained presence (`<prefix>/_bridge`, with a last will) and "
          "the quick HELLO retry bring the session back (before issue #13 a bridge SIGKILL "
          "cost 19 s and a broker one 10 s, measured the same way).",
          "- *Acknowledged* means covered by a completed sync point of the telemetry log (a "
          "seal, or one of the bridge's group commits every `commit_ms`, docs/telemetry-log.md "
          "section 4); only then does the bridge send the device its ACK. Every record sealed "
          "before a SIGKILL is checked to be there, at the same position, after recovery.",
          "- CI runs the short form with `pytest` (load: 50 devices for a 20 s window instead of "
          "the long run's 90 s; fewer repetitions and fuzz inputs); about 2 minutes on 2 cores.",
          "- Known limits, left as they are: a device may retain any number of facts under its "
          "prefix (no per-link cap on the host's retained store); a CRC-16 lets a randomly "
          "damaged frame through with probability 2^-16 (frames with up to 3 bit flips are "
          "always caught, which the line fuzzer relies on); a device killed during an outage "
          "without the flash journal loses its spool (RAM), and the earlier boot's last "
          "numbers are then missing at its end, not counted as gaps by anyone."]
    failed = sorted(k for k, v in outcomes.items() if v[0] == "failed")
    skipped = sorted(k for k, v in outcomes.items() if v[0] == "skipped")
    xfailed = sorted(k for k, v in outcomes.items() if v[0] == "xfailed")
    L += ["", "## Tests run", "", "%d tests, %d passed, %d failed%s%s%s." % (
        len(outcomes), sum(1 for v in outcomes.values() if v[0] == "passed"), len(failed),
        (": " + ", ".join("`%s`" % k for k in failed)) if failed else "",
        ("; %d skipped (an optional tool missing, e.g. atheris): " % len(skipped)
         + ", ".join("`%s`" % k for k in skipped)) if skipped else "",
        ("; %d expected failures (xfail: a known gap, named in the test): " % len(xfailed)
         + ", ".join("`%s`" % k for k in xfailed)) if xfailed else ""), ""]
    return "\n".join(L) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m dev.soak", description=__doc__.splitlines()[0])
    ap.add_argument("--short", action="store_true", help="the CI form instead of the long one")
    ap.add_argument("--out", default=os.path.join(ROOT, "RELIABILITY.md"))
    ap.add_argument("--no-existing", action="store_true",
                    help="only tests/reliability, not the existing tests it points to")
    ap.add_argument("--no-presence", action="store_true",
                    help="skip the recovery figures (dev/presence.py: outage -> session-up)")
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="edgebus-soak-")
    results = os.path.join(tmp, "results.jsonl")
    junit = os.path.join(tmp, "junit.xml")
    env = dict(os.environ, EDGEBUS_REL_OUT=results)
    if not args.short:
        env["EDGEBUS_SOAK"] = "1"
    tests = ["tests/reliability"] + ([] if args.no_existing else EXISTING)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", junit] \
        + (["--soak"] if not args.short else []) + tests
    t0 = time.monotonic()
    rc = subprocess.call(cmd, cwd=ROOT, env=env)
    if not args.no_presence:
        _presence(results, 2 if args.short else 5)
    wall = time.monotonic() - t0
    write(tmp, results, junit, wall, args)
    return rc


def _presence(results, cycles):
    """Outage -> session-up over MQTT (dev/presence.py: the bridge, then the
    broker, SIGKILLed and started again at once), as figures rows."""
    out = results + ".presence.json"
    rc = subprocess.call([sys.executable, "-m", "dev.presence", "--cycles", str(cycles),
                          "--out", out], cwd=ROOT)
    if rc != 0 or not os.path.exists(out):
        print("dev.presence failed (exit %d): no recovery figures" % rc)
        return
    with open(out) as f:
        rows = list(json.load(f).values())[0]
    with open(results, "a") as f:
        for case in ("bridge", "broker"):
            rs = [r for r in rows if r[0] == case]
            f.write(json.dumps({
                "kind": "figures", "case": "recovery: %s SIGKILLed, started again at once" % case,
                "test": "dev/presence.py", "tried": len(rs),
                "outage_to_session_s": [r[1] for r in rs],
                "outage_to_device_hello_s": [r[2] for r in rs]}) + "\n")


def write(tmp, results, junit, wall, args):
    figures = []
    if os.path.exists(results):
        with open(results) as f:
            figures = [json.loads(x) for x in f if x.strip()]
    figures = [f for f in figures if f.get("kind") == "figures"]
    text = render(_outcomes(junit), figures, not args.short, wall,
                  "python -m dev.soak" + (" --short" if args.short else ""),
                  os.path.getmtime(junit))
    with open(args.out, "w") as f:
        f.write(text)
    print("wrote %s (%.0f s)" % (args.out, wall))


if __name__ == "__main__":
    sys.exit(main())
