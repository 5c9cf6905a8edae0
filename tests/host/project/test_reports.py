"""The reports and docs say what is true now; history is in CHANGELOG.md and git.

BENCHMARKS.md and RELIABILITY.md are rendered from stored results through the
templates in dev/bench/templates and dev/soak_templates, so the words are checked
where they are written; the repository has no issue tracker, so no issue numbers."""

import glob
import json
import os
import re

from dev import soak
from dev.bench import report
from tests.conftest import ROOT

DOCS = [
    "BENCHMARKS.md",
    "RELIABILITY.md",
    "README.md",
    "ARCHITECTURE.md",
    "*/README.md",
    "docs/*.md",
    "dev/bench/templates/*.md",
    "dev/soak_templates/*",
]
CODE = ("edgebus", "dev", "tests")  # every product file is under edgebus/
ISSUE = r"\bissues? #?\d+"
HISTORY = [
    ISSUE,
    r"(?<!\bis )(?<!\bare )(?<!\bbe )(?<!\bbeen )\bused to\b",
    r"\b(before|after|since) the (fix|change)\b",
    r"\bwas fixed\b",
    r"\bbefore issue\b",
    r"\bthe old behaviou?r\b",
    r"\brefreshed since\b",
    r'"Was"',
    r"\(before\)",
]


def _found(patterns, paths):
    """'path:line: text' for each line of paths that matches one of patterns."""
    rx = re.compile("|".join("(?:%s)" % p for p in patterns), re.I)
    out = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if rx.search(line):
                    out.append("%s:%d: %s" % (os.path.relpath(path, ROOT), n, line.strip()))
    return out


def _docs(root=ROOT):
    return sorted({p for g in DOCS for p in glob.glob(os.path.join(root, g))})


def _code(root=ROOT):
    me = os.path.abspath(__file__)
    return sorted(
        p
        for top in CODE
        for p in glob.glob(os.path.join(root, top, "**", "*.py"), recursive=True)
        if os.path.abspath(p) != me
    )


def test_the_docs_and_reports_do_not_narrate_history():
    assert len(_docs()) >= 10
    assert _found(HISTORY, _docs()) == []


def test_no_issue_numbers_in_the_code():
    assert len(_code()) > 100
    assert _found([ISSUE], _code()) == []


def test_the_checks_catch_a_planted_phrase(tmp_path):
    os.makedirs(tmp_path / "docs")
    os.makedirs(tmp_path / "edgebus" / "bridge")
    (tmp_path / "docs" / "x.md").write_text(
        "The receiver sends one ACK per batch.\nThe receiver used to send one per frame.\n"
        "Before the fix it sent two.\nA tool is used to flash boards.\n"
    )
    (tmp_path / "edgebus" / "bridge" / "x.py").write_text(
        '"""The stop at fleet size (issue %s)."""\n' % 25
    )
    assert [x.split(": ", 1)[1] for x in _found(HISTORY, _docs(tmp_path))] == [
        "The receiver used to send one per frame.",
        "Before the fix it sent two.",
    ]
    assert len(_found([ISSUE], _code(tmp_path))) == 1


def _images(text):
    return re.sub(r"!\[([^]]*)\]\([^)]*\)", r"![\1]()", text)


def test_benchmarks_md_is_the_templates_filled_with_the_stored_results(tmp_path):
    with open(os.path.join(ROOT, "dev", "bench", "results", "benchmarks.json")) as f:
        res = json.load(f)
    md = report.markdown(res, str(tmp_path), ROOT)
    with open(os.path.join(ROOT, "BENCHMARKS.md"), encoding="utf-8") as f:
        assert _images(f.read()) == _images(md), "run python -m dev.bench --render"


def _results(outcome):
    """Stored soak results: every case's tests with one outcome, one figures row."""
    return {
        "meta": {
            "soak": False,
            "wall": 400.0,
            "cmd": "python -m dev.soak --short",
            "when": 0,
            "cpus": 2,
            "commit": "0123abc",
        },
        "outcomes": {t + "_x": [outcome, 1.0] for c in soak.cases() for t in c["tests"]},
        "figures": [
            {
                "kind": "figures",
                "case": "fault: device killed and restarted",
                "test": "t.py::t",
                "tried": 7,
                "calls": [1, 2],
            }
        ],
    }


def test_the_soak_report_is_its_templates_filled_with_the_results():
    md = soak.render(_results("passed"))
    assert "$" not in md
    for c in soak.cases():
        assert "| %s | %s |" % (c["case"], c["checked"]) in md
    assert "| 7 | **held** |" in md and "calls [1, 2]" in md
    assert "of 0123abc);" in md.replace("\n", " ")
    assert "**FAILED**" in soak.render(_results("failed"))
    with open(os.path.join(ROOT, "RELIABILITY.md"), encoding="utf-8") as f:
        doc = f.read()
    words = soak._t(
        "figures", rows="", tests=0, passed=0, failed=0, failed_list="", skipped="", xfailed=""
    )
    assert words.split("## Reading the figures")[1].split("## Tests run")[0] in doc
