"""python -m dev.soak [--short] [--out RELIABILITY.md] [--render] [--only TEST ...]

Runs the reliability suite (tests/reliability) in its long form (--soak),
plus the existing tests that cover the other cases, then stores what was
measured (dev/soak_results.json: each test's outcome, the figures) and writes
RELIABILITY.md from it: each case, the tests that cover it, how many times it
was tried, whether it held, and its figures. --short runs the CI form instead
(the report then says so); --render runs nothing and writes the report from
the stored results. The cases are dev/soak_templates/cases.toml and the
report's words the templates beside it. --only runs just the tests named
(in the long form unless --short) and puts their outcomes and figures into
the stored results in place of the earlier ones; the report names such runs."""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
import xml.etree.ElementTree as ET
from string import Template

from dev import checkout

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATES = os.path.join(ROOT, "dev", "soak_templates")
STORED = os.path.join(ROOT, "dev", "soak_results.json")

# Existing tests that cover a case (run by the soak as they are).
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
    "tests/portable/test_link_unsealed.py",
    "tests/portable/test_link_flow.py",
    "tests/host/mqtt/test_mqtt.py::test_a_flooding_device_gets_its_share_and_never_stops_the_others",
    "tests/host/link/test_link_unsealed_property.py",
    "tests/host/bridge/test_shell.py::test_another_user_gets_only_what_an_acl_entry_grants",
]


def _t(name, **fields):
    """dev/soak_templates/NAME.md with its fields filled in."""
    with open(os.path.join(TEMPLATES, name + ".md"), encoding="utf-8") as f:
        return Template(f.read()).substitute(fields).rstrip("\n")


def cases():
    """The report's cases, in order (dev/soak_templates/cases.toml)."""
    with open(os.path.join(TEMPLATES, "cases.toml"), "rb") as f:
        return tomllib.load(f)["case"]


def _outcomes(junit):
    out = {}
    for tc in ET.parse(junit).getroot().iter("testcase"):
        path = tc.get("classname", "").replace(".", "/")
        nodeid = "%s.py::%s" % (path, tc.get("name"))
        bad = tc.find("failure") is not None or tc.find("error") is not None
        skip = tc.find("skipped")
        # junit says "skipped" for an expected failure too (pytest.mark.xfail)
        out[nodeid] = (
            "failed"
            if bad
            else "passed"
            if skip is None
            else "xfailed"
            if skip.get("type") == "pytest.xfail"
            else "skipped",
            float(tc.get("time", 0)),
        )
    return out


def _fmt(v):
    if isinstance(v, float):
        return "%g" % v
    if isinstance(v, list) and len(v) > 14:
        return "[" + ", ".join(map(_fmt, v[:14])) + ", ...]"
    return json.dumps(v) if isinstance(v, (list, dict)) else str(v)


def render(results):
    """RELIABILITY.md for stored results: {"meta": {soak, wall, cmd, when, cpus,
    commit}, "outcomes": {node id: [outcome, seconds]}, "figures": [row, ...]}."""
    m, outcomes, figures = results["meta"], results["outcomes"], results["figures"]
    blocks = [
        _t(
            "header",
            form="long (--soak)" if m["soak"] else "short (CI)",
            when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(m["when"])),
            cmd=m["cmd"],
            wall="%.0f" % m["wall"],
            cpus=m["cpus"],
            commit=m["commit"],
        )
    ]
    for u in m.get("updates", ()):
        blocks.append(
            "Rows of %s come from a later run of just those tests (`%s --only`, the %s form, "
            "%s, the code of %s)."
            % (
                ", ".join("`%s`" % t for t in u["tests"]),
                u["cmd"],
                "long" if u["soak"] else "short",
                time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(u["when"])),
                u["commit"],
            )
        )
    rows, section = [], None
    for c in cases() + [None]:
        if section and (c is None or c["section"] != section):
            blocks.append(_t("section", section=section, rows="\n".join(rows)))
            rows = []
        if c is None:
            break
        section = c["section"]
        rows.append(_case_row(c, outcomes, figures))
    atheris = any(f["case"].startswith("fuzz: atheris") for f in figures)
    blocks.append(
        _t(
            "fuzz_atheris" if atheris else "fuzz_hypothesis",
            inputs="20,000 / 15,000 / 10,000" if m["soak"] else "300 / 300 / 200",
        )
    )
    skip = ("kind", "case", "test", "soak")
    fig_rows = [
        "- **%s** (`%s`): " % (f["case"], f["test"])
        + ", ".join("%s %s" % (k, _fmt(v)) for k, v in f.items() if k not in skip)
        for f in figures
    ]

    def named(outcome):
        return ", ".join(
            "`%s`" % k for k in sorted(k for k, v in outcomes.items() if v[0] == outcome)
        )

    count = {
        o: sum(1 for v in outcomes.values() if v[0] == o)
        for o in ("passed", "failed", "skipped", "xfailed")
    }
    blocks.append(
        _t(
            "figures",
            rows="\n".join(fig_rows),
            tests=len(outcomes),
            passed=count["passed"],
            failed=count["failed"],
            failed_list=": " + named("failed") if count["failed"] else "",
            skipped=_t("skipped", n=count["skipped"], tests=named("skipped"))
            if count["skipped"]
            else "",
            xfailed=_t("xfailed", n=count["xfailed"], tests=named("xfailed"))
            if count["xfailed"]
            else "",
        )
    )
    return "\n\n".join(blocks) + "\n"


def _case_row(c, outcomes, figures):
    """One case's row: its tests' outcomes, and how often it was tried."""
    tests = c["tests"]
    ran = {k: v for k, v in outcomes.items() if any(k.startswith(t) for t in tests)}
    skipped = sum(1 for v in ran.values() if v[0] == "skipped")
    xfailed = sum(1 for v in ran.values() if v[0] == "xfailed")
    held = any(v[0] == "passed" for v in ran.values()) and all(
        v[0] in ("passed", "skipped", "xfailed") for v in ran.values()
    )
    tried = [str(f["tried"]) for f in figures if c.get("figures") and f["case"] == c["figures"]]
    if not tried:
        tried = ["%d test(s)" % len(ran)]
    return "| %s | %s | %s | %s | %s |" % (
        c["case"],
        c["checked"],
        "<br>".join("`%s`" % t for t in tests),
        ", ".join(tried),
        (
            "**held**"
            + (" (%d skipped)" % skipped if skipped else "")
            + (
                " (%d expected failure%s: xfail)" % (xfailed, "s" if xfailed > 1 else "")
                if xfailed
                else ""
            )
        )
        if held
        else ("NOT RUN" if not ran or skipped == len(ran) else "**FAILED**"),
    )


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m dev.soak", description=__doc__.splitlines()[0])
    ap.add_argument("--short", action="store_true", help="the CI form instead of the long one")
    ap.add_argument("--out", default=os.path.join(ROOT, "RELIABILITY.md"))
    ap.add_argument(
        "--no-existing",
        action="store_true",
        help="only tests/reliability, not the existing tests it points to",
    )
    ap.add_argument(
        "--no-presence",
        action="store_true",
        help="skip the recovery figures (dev/presence.py: outage -> session-up)",
    )
    ap.add_argument(
        "--results",
        default=STORED,
        help="where the run's results are stored (and read by --render)",
    )
    ap.add_argument(
        "--render", action="store_true", help="run nothing: write --out from the stored --results"
    )
    ap.add_argument(
        "--only",
        nargs="+",
        metavar="TEST",
        help="run just these tests (pytest node ids or files) and update their rows",
    )
    args = ap.parse_args(argv)
    if args.render:
        with open(args.results) as f:
            _write_report(json.load(f), args.out)
        return 0
    tmp = tempfile.mkdtemp(prefix="edgebus-soak-")
    results = os.path.join(tmp, "results.jsonl")
    junit = os.path.join(tmp, "junit.xml")
    env = dict(os.environ, EDGEBUS_REL_OUT=results)
    if not args.short:
        env["EDGEBUS_SOAK"] = "1"
    tests = args.only or ["tests/reliability"] + ([] if args.no_existing else EXISTING)
    cmd = (
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", junit]
        + (["--soak"] if not args.short else [])
        + tests
    )
    t0 = time.monotonic()
    rc = subprocess.call(cmd, cwd=ROOT, env=env)
    if not args.no_presence and not args.only:
        _presence(results, 2 if args.short else 5)
    wall = time.monotonic() - t0
    write(tmp, results, junit, wall, args)
    return rc


def _presence(results, cycles):
    """Outage -> session-up over MQTT (dev/presence.py: the bridge, then the
    broker, SIGKILLed and started again at once), as figures rows."""
    out = results + ".presence.json"
    rc = subprocess.call(
        [sys.executable, "-m", "dev.presence", "--cycles", str(cycles), "--out", out], cwd=ROOT
    )
    if rc != 0 or not os.path.exists(out):
        print("dev.presence failed (exit %d): no recovery figures" % rc)
        return
    with open(out) as f:
        rows = list(json.load(f).values())[0]
    with open(results, "a") as f:
        for case in ("bridge", "broker"):
            rs = [r for r in rows if r[0] == case]
            f.write(
                json.dumps(
                    {
                        "kind": "figures",
                        "case": "recovery: %s SIGKILLed, started again at once" % case,
                        "test": "dev/presence.py",
                        "tried": len(rs),
                        "outage_to_session_s": [r[1] for r in rs],
                        "outage_to_device_hello_s": [r[2] for r in rs],
                    }
                )
                + "\n"
            )


def write(tmp, results, junit, wall, args):
    """Store the run's results (args.results) and write the report from them."""
    figures = []
    if os.path.exists(results):
        with open(results) as f:
            figures = [json.loads(x) for x in f if x.strip()]
    meta = {
        "soak": not args.short,
        "wall": round(wall, 1),
        "cmd": "python -m dev.soak" + (" --short" if args.short else ""),
        "when": os.path.getmtime(junit),
        "cpus": os.cpu_count(),
        "commit": checkout.label(),
    }
    outcomes = _outcomes(junit)
    figures = [f for f in figures if f.get("kind") == "figures"]
    if args.only:
        stored = _update(args.results, meta, outcomes, figures, args.only)
    else:
        stored = {"meta": meta, "outcomes": outcomes, "figures": figures}
    with open(args.results, "w") as f:
        json.dump(stored, f, indent=1)
    _write_report(stored, args.out)
    print("wrote %s and %s (%.0f s)" % (args.results, args.out, wall))


def _update(path, meta, outcomes, figures, only):
    """The stored results at ``path`` with the rows of a run of ``only``
    (its outcomes, and its figures by case) in place of the earlier ones."""
    with open(path) as f:
        stored = json.load(f)
    old = stored["outcomes"]
    for k in [k for k in old if any(k.startswith(t) for t in only)]:
        del old[k]
    old.update(outcomes)
    cases = {f["case"] for f in figures}
    stored["figures"] = [f for f in stored["figures"] if f["case"] not in cases] + figures
    # An earlier update's tests that this run covers say no more where their rows came from.
    updates = []
    for u in stored["meta"].get("updates", []):
        u["tests"] = [t for t in u["tests"] if not any(t.startswith(o) for o in only)]
        if u["tests"]:
            updates.append(u)
    stored["meta"]["updates"] = updates + [dict(meta, tests=only)]
    return stored


def _write_report(stored, out):
    with open(out, "w") as f:
        f.write(render(stored))


if __name__ == "__main__":
    sys.exit(main())
