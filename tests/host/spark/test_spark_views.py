"""Typed views (edgebus.ingest.views): two views from one log, a key added
mid-run becomes a column, a wrong type goes to rejects with its reason, no row
twice across runs or a crash between the rejects and a view, and
`edgebus views infer` drafts a block that works when pasted in, the same
read with pyarrow (its default) or with Spark."""

import argparse
import subprocess
import sys
import tomllib

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql import types as T  # noqa: E402

from edgebus.ingest import compaction, job, tablelog, views  # noqa: E402
from edgebus.ingest.views import config as views_config  # noqa: E402
from edgebus.ingest.views.infer import infer_block  # noqa: E402
from edgebus.tlog import LogWriter  # noqa: E402
from tests.host.spark.sparkkit import (  # noqa: E402
    ROOT,
    device_record,
    ingest_here,
    local_record,
    spark_env,
)

T0 = 1_712_000_000.0
VIEWS = """
[[view]]
name = "temps"
topic = "dev/+/temp"
schema = "temp DOUBLE, n BIGINT"

[[view]]
name = "hums"
topic = "dev/+/hum"
schema = "value DOUBLE"
max_columns = 1
"""


def _write(log, start, count, rssi=False, t0=T0):
    """count rounds of node-a and node-b readings (seq start..), a humidity
    reading each and a host record every 5th round; node-b's temps carry
    rssi when asked.  Returns the (node, seq) of the temps written."""
    out = []
    with LogWriter(str(log), segment_bytes=3000, gateway="gw-1") as w:
        for s in range(start, start + count):
            t = t0 + s
            for node in ("node-a", "node-b"):
                p = {"temp": 20.5 + s % 3, "n": s}
                if rssi and node == "node-b":
                    p["rssi"] = -60 - s % 5
                w.append(device_record(node, node + "-1", 2 * s, t, payload=p))
                out.append((node, 2 * s))
                hum = device_record(
                    node, node + "-1", 2 * s + 1, t, payload=40 + s, topic=("dev", node, "hum")
                )
                w.append(hum)
            if s % 5 == 0:
                w.append(local_record(s, t))
    return out


def _args(tmp_path, views_file):
    ap = argparse.ArgumentParser()
    job.add_arguments(ap)
    return ap.parse_args([
        "--log", str(tmp_path / "log"), "--table", str(tmp_path / "table"),
        "--checkpoint", str(tmp_path / "ckpt"), "--once", "--views", str(views_file),
    ])  # fmt: skip


def _ingest(spark, args):
    """An `edgebus ingest --once --views` run in this session: the query,
    then the refresh the job does at its end; the refresh's line."""
    job.start(spark, args).awaitTermination()
    return views.refresh(spark, args)


def _rows(spark, path, *cols):
    return sorted(tuple(r) for r in views.read_view(spark, path).select(*cols).collect())


def test_views_evolve_reject_and_keep_each_row_once(spark, tmp_path):
    (tmp_path / "views.toml").write_text(VIEWS)
    args = _args(tmp_path, tmp_path / "views.toml")
    table = str(tmp_path / "table")
    temps, hums, rejects = table + ".views/temps", table + ".views/hums", table + ".views/_rejects"
    want = _write(tmp_path / "log", 0, 20)
    # A reading with a string where the view has a DOUBLE, and a relayed one.
    with LogWriter(str(tmp_path / "log"), gateway="gw-1") as w:
        w.append(device_record("node-c", "c-1", 7, T0 + 30, payload={"temp": "hot", "n": 1}))
        relayed = device_record("node-c", "c-1", 8, T0 + 31, payload={"temp": 1.5, "n": 2})
        relayed["extra"]["via"] = ["gw-2"]
        w.append(relayed)
        # A device that would add columns beyond the view's max_columns.
        hum = {"k%d" % i: i for i in range(500)}
        w.append(
            device_record("node-c", "c-1", 9, T0 + 32, payload=hum, topic=("dev", "node-c", "hum"))
        )
    line = _ingest(spark, args)
    assert line == "views: temps +41 rows, 1 reject; hums +40 rows, 1 reject", line
    got = _rows(spark, temps, "peer_node", "seq", "temp", "n")
    assert [g[:2] for g in got] == sorted(want + [("node-c", 8)])
    assert ("node-a", 6, 20.5, 3) in got
    assert "rssi" not in views.read_view(spark, temps).columns
    via = views.read_view(spark, temps).where("peer_node = 'node-c'").select("via", "gateway")
    assert [tuple(r) for r in via.collect()] == [(["gw-2"], "gw-1")]
    assert _rows(spark, hums, "peer_node", "seq", "value")[:2] == [
        ("node-a", 1, 40.0), ("node-a", 3, 41.0)]  # fmt: skip
    bad = spark.read.parquet(rejects).where("view = 'temps'").collect()
    full = spark.read.parquet(rejects).where("view = 'hums'").collect()
    assert [(r.reason, r.column, r.seq) for r in full] == [
        ("key 'k0' has no column (the view has its max_columns, 1)", "k0", 9)
    ]
    assert views.read_view(spark, hums).columns[0] == "value"
    assert [(r.view, r.reason, r.column, r.expected, r.value, r.peer_node, r.seq) for r in bad] == [
        ("temps", "expected double, got STRING", "temp", "double", '"hot"', "node-c", 7)
    ]
    assert bad[0].payload == '{"temp":"hot","n":1}'

    # Second run: node-b's firmware adds rssi (a column appears), a reading has
    # an array for a DOUBLE, and the refresh dies after the rejects' commit,
    # before the views': the next one writes each row once, no reject again.
    want += _write(tmp_path / "log", 20, 10, rssi=True)
    with LogWriter(str(tmp_path / "log"), gateway="gw-1") as w:
        w.append(device_record("node-a", "node-a-1", 900, T0 + 99, payload={"temp": [1], "n": 0}))
        w.append(device_record("node-a", "node-a-1", 901, T0 + 99, payload={"temp": 3, "n": 9}))
    want.append(("node-a", 901))
    job.start(spark, args).awaitTermination()
    real = tablelog.write_batch

    def dies_at_views(df, path, *a, **k):
        if "_rejects" not in path:
            raise OSError("killed")
        return real(df, path, *a, **k)

    tablelog.write_batch = dies_at_views
    try:
        with pytest.raises(OSError):
            views.refresh(spark, args)
    finally:
        tablelog.write_batch = real
    assert spark.read.parquet(rejects).count() == 3
    line = views.refresh(spark, args)
    assert line == "views: temps +21 rows (1 new column: rssi), 0 rejects; hums +20 rows, 0 rejects"
    got = _rows(spark, temps, "peer_node", "seq", "rssi", "temp")
    assert [g[:2] for g in got] == sorted(want + [("node-c", 8)])  # each row once
    rssi = {(n, s): r for n, s, r, _ in got}
    assert all(rssi[("node-b", 2 * s)] == -60 - s % 5 for s in range(20, 30))
    assert all(rssi[k] is None for k in rssi if k[0] != "node-b" or k[1] < 40)
    assert ("node-a", 901, None, 3.0) in got
    reasons = [r.reason for r in spark.read.parquet(rejects).where("seq = 900").collect()]
    assert reasons == ["expected double, got ARRAY<BIGINT>"]
    assert spark.read.parquet(rejects).count() == 3
    # Spark's own reader merges the files' schemas when asked.
    merged = spark.read.option("mergeSchema", "true").parquet(temps)
    assert {"rssi", "temp", "n", "via", "offset"} <= set(merged.columns)
    assert merged.count() == len(got)
    assert views.refresh(spark, args) is None  # nothing new
    # Without Spark: the committed files, every column.
    t = tablelog.dataset(temps).to_table(columns=["peer_node", "seq", "rssi", "temp"])
    assert sorted(tuple(r.values()) for r in t.to_pylist()) == got
    # Compaction keeps the columns of old and new files.
    compaction.compact(temps)
    assert _rows(spark, temps, "peer_node", "seq", "rssi", "temp") == got

    # views infer drafts a block for the temps; pasted in as a third view, it works.
    block = infer_block(spark, table, "dev/+/temp", "temps2")
    doc = tomllib.loads(block)["view"][0]
    assert doc["schema"] == "n BIGINT, rssi BIGINT, temp DOUBLE", block
    assert "# temp: DECIMAL(3,1) x" in block  # the key with mixed types is pointed out
    (tmp_path / "views.toml").write_text(VIEWS + block)
    args = _args(tmp_path, tmp_path / "views.toml")
    assert views.refresh(spark, args) == "views: temps2 +62 rows, 2 rejects"
    t2 = views.read_view(spark, table + ".views/temps2")
    assert t2.schema["rssi"].dataType.simpleString() == "bigint"
    assert t2.count() == len(got)

    # A schema Spark cannot parse, and a declared type that is not the
    # table's, are said clearly; the other views go on.
    (tmp_path / "views.toml").write_text(
        VIEWS.replace("temp DOUBLE", "temp BIGINT") + '[[view]]\nname = "x"\ntopic = "a/#"\n'
        'schema = "x DUBLE"\n'
    )
    args = _args(tmp_path, tmp_path / "views.toml")
    with pytest.raises(ValueError) as e:
        views.refresh(spark, args)
    assert "view temps: column temp is double in its table, the file says bigint" in str(e.value)
    assert "view x: bad schema 'x DUBLE': " in str(e.value) and "DUBLE" in str(e.value)


@pytest.mark.parametrize(
    "text, error",
    [
        ('[[view]]\nname = "t"\ntopic = "a/#/b"\n', "bad topic pattern 'a/#/b'"),
        ('[[view]]\nname = "t"\ntopic = "a"\n[[view]]\nname = "T"\ntopic = "b"\n', "used twice: t"),
        ('[[view]]\nname = "t"\ntopic = "a"\nschema = "seq BIGINT"\n', "'seq' is a provenance"),
        ('[[view]]\nname = "t-1"\ntopic = "a"\n', "name must be a word"),
        ('[[view]]\nname = "t"\ntopic = "a"\nshema = "x INT"\n', "unknown key(s) shema"),
        ('[view]\nname = "t"\n', "no [[view]] table"),
        ('[[view]]\nname = "t"\ntopic = "a"\nmax_columns = 0\n', "max_columns must be"),
        ('[[view]]\nname = "t"\ntopic = "a"\nmax_columns = true\n', "max_columns must be"),
        (
            '[[view]]\nname = "t"\ntopic = "a"\nschema = "x INT, y INT"\nmax_columns = 1\n',
            "declares more than max_columns (1)",
        ),
    ],
)
def test_the_views_file_is_checked(tmp_path, text, error):
    (tmp_path / "v.toml").write_text(text)
    with pytest.raises(ValueError) as e:
        views_config.load(str(tmp_path / "v.toml"))
    assert error in str(e.value) and "v.toml" in str(e.value)


def _f(name):
    return T.StructField(name, T.DoubleType())


@pytest.mark.parametrize(
    "declared, observed, fit",
    [
        (T.DoubleType(), "BIGINT", True),
        (T.DoubleType(), "DECIMAL(3,1)", True),
        (T.DoubleType(), "STRING", False),  # "21.5" as text is not a number
        (T.LongType(), "DECIMAL(2,0)", True),  # 3.0
        (T.LongType(), "DECIMAL(2,1)", False),  # 3.5: a cast would truncate it
        (T.StringType(), "BIGINT", False),
        (T.BooleanType(), "BOOLEAN", True),
        (T.DateType(), "STRING", True),  # the cast then decides
        (T.StructType([_f("x"), _f("y")]), "OBJECT<x: BIGINT>", True),
        (T.StructType([_f("x")]), "OBJECT<x: BIGINT, `a b`: STRING>", False),  # a field it lacks
        (T.MapType(T.StringType(), T.LongType()), "OBJECT<a: BIGINT, b: BIGINT>", True),
        (T.ArrayType(T.DoubleType()), "ARRAY<VARIANT>", False),
        (T.VariantType(), "OBJECT<x: ARRAY<STRING>>", True),
        (T.LongType(), "VOID", True),  # null fits all
    ],
)
def test_what_fits_a_column(declared, observed, fit):
    from edgebus.ingest.views import types as views_types

    assert views_types.fits(declared, views_types.parse(observed)) is fit


@pytest.mark.parametrize(
    "counts, ddl",
    [
        ([("BIGINT", 5)], "BIGINT"),
        ([("BIGINT", 5), ("DECIMAL(3,1)", 1)], "DOUBLE"),
        ([("DECIMAL(2,0)", 2)], "DOUBLE"),  # 21.0: a float's text
        ([("STRING", 1), ("BIGINT", 5)], "BIGINT"),  # the most frequent; the string is a reject
        ([("VOID", 3)], None),
        (
            [("OBJECT<x: BIGINT>", 1), ("OBJECT<`a b`: STRING>", 1)],
            "STRUCT<`a b`: STRING, x: BIGINT>",
        ),
        ([("ARRAY<VARIANT>", 1)], "ARRAY<VARIANT>"),
    ],
)
def test_a_new_columns_type(counts, ddl):
    from edgebus.ingest.views import types as views_types

    assert views_types.infer(counts) == ddl


def test_views_infer_without_a_table_says_so(tmp_path):
    from dev.harness.process import run_module

    r = run_module("edgebus.tools.cli", "views", "infer", "--table", str(tmp_path / "nope"),
                   "--topic", "dev/#", timeout=60)  # fmt: skip
    assert r.returncode == 2 and "no table at" in r.stderr and "Traceback" not in r.stderr, r.stderr


# Payloads on dev/NODE/mix that cover schema_of_variant's rules: integers in
# and past 64 bits and 38 digits, fractions (a float's shortest text: 21.0,
# -0.0, 1e+16, 1e-07, 0.30000000000000004), strings, booleans, nulls, arrays
# of mixed numbers, of mixed kinds, nested, empty, objects with keys that
# need quoting or sort differently in Java (UTF-16) than by code point, keys
# that cannot be columns; and payloads that are not objects, or null.
MIX = [
    {"temp": 21.5, "n": 1, "big": 2**63, "wide": 10**38 - 1, "huge": 10**38, "flag": True,
     "s": "21.5", "nul": None, "seq": 5, "": 1, "a b": [1, 2.5], "arr": [], "mix": [1, "a"],
     "obj": {"b": 1, "a": None, "\u00e9": [1]}},
    {"temp": 21.0, "n": 127, "big": -(2**63) - 1, "wide": 0.1 + 0.2, "flag": False, "s": "x",
     "nul": None, "arr": [[1], []], "mix": [{"a": 1}, {"b": "x"}], "f": 1e16,
     "obj": {"a": "x", "\U0001f600": {}, "\ue000": 1, "z": [1, 2**63]}},
    {"temp": "hot", "n": 2**31, "f": 1e-7, "neg": -0.0, "dec": 123456.789,
     "nest": {"x": [1, 2.5, None], "y": [[1], ["a"]], "w": [0.5, 10**38 - 1]}},
    {"temp": 22, "n": -129, "f": 0.1, "neg": 1.0, "arr": [None, 1e300]},
    7, "text", [1, 2], True, 2.5, None, {},
]  # fmt: skip


def _mixed_table(spark, tmp_path):
    """A table of MIX from two devices (node-a three times), beside readings
    on dev/NODE/mix/sub, dev/NODE/temp and host/load."""
    recs, seq = [], 0
    for node, rounds in (("node-a", 3), ("node-b", 1)):
        for r in range(rounds):
            for p in MIX if r == 0 else MIX[:2]:
                seq += 1
                rec = device_record(node, node + "-1", seq, T0 + seq, topic=("dev", node, "mix"))
                rec["payload"] = p  # None too: a null payload
                recs.append(rec)
        seq += 1
        sub = device_record(node, node + "-1", seq, T0 + seq, payload={"sub": 1},
                            topic=("dev", node, "mix", "sub"))  # fmt: skip
        recs += [sub, device_record(node, node + "-1", seq + 1, T0 + seq)]
        seq += 1
    recs.append(local_record(1, T0))
    with LogWriter(str(tmp_path / "log"), segment_bytes=3000, gateway="gw-1") as w:
        for rec in recs:
            w.append(rec)
    table = str(tmp_path / "table")
    r = ingest_here(spark, tmp_path / "log", table, tmp_path / "ckpt", "--once")
    assert r.returncode == 0, r.stderr
    return table


# The CLI in a process of its own that says, after the command, whether it
# imported pyspark (a JVM starts only through it).
_CLI_SAYING_PYSPARK = (
    "import sys; from edgebus.tools.cli import main; rc = main(sys.argv[1:]); "
    "print('pyspark imported: %s' % ('pyspark' in sys.modules)); sys.exit(rc)"
)


def test_views_infer_without_spark_is_sparks(spark, tmp_path):
    """views infer's block read with pyarrow (its default: views.arrow and
    json_types) is the block read with Spark, for patterns with +, # and a
    trailing # matching no token; the CLI's default starts no JVM."""
    table = _mixed_table(spark, tmp_path)
    patterns = [("dev/+/mix", None), ("dev/+/mix/#", "mixes"), ("dev/#", "all"), ("#", "any"),
                ("dev/node-a/+", None), ("+/node-b/mix", "b")]  # fmt: skip
    for topic, name in patterns:
        block = infer_block(None, table, topic, name)
        assert block == infer_block(spark, table, topic, name), topic
    mix = tomllib.loads(infer_block(None, table, "dev/+/mix"))["view"][0]
    assert mix["name"] == "mix" and "temp DOUBLE" in mix["schema"], mix
    assert "huge DOUBLE" in mix["schema"] and "`a b` ARRAY<DOUBLE>" in mix["schema"]
    for topic in ("dev/+/nope", "dev/+/mix/sub/x"):
        for s in (None, spark):
            with pytest.raises(ValueError, match="no row of"):
                infer_block(s, table, topic)
    r = subprocess.run(
        [sys.executable, "-c", _CLI_SAYING_PYSPARK, "views", "infer", "--table", table,
         "--topic", "dev/+/mix"],
        cwd=ROOT, env=spark_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout == infer_block(spark, table, "dev/+/mix") + "pyspark imported: False\n"


# JSON text -> what schema_of_variant(parse_json(text)) printed in pyspark 4.3
# (the same inside an object read by from_json as map<string,variant>).
SPARK_TYPES = [
    ("0", "BIGINT"), ("-0", "BIGINT"), ("127", "BIGINT"), ("128", "BIGINT"),
    ("-32769", "BIGINT"), ("2147483648", "BIGINT"), ("9223372036854775807", "BIGINT"),
    ("-9223372036854775808", "BIGINT"), ("9223372036854775808", "DECIMAL(19,0)"),
    ("-9223372036854775809", "DECIMAL(19,0)"), ("10000000000000000000", "DECIMAL(20,0)"),
    ("12345678901234567890123", "DECIMAL(23,0)"), ("9" * 38, "DECIMAL(38,0)"),
    ("-" + "9" * 38, "DECIMAL(38,0)"), ("1" + "0" * 38, "DOUBLE"), ("1" * 1000, "DOUBLE"),
    ("0.1", "DECIMAL(1,1)"), ("1.0", "DECIMAL(1,0)"), ("21.5", "DECIMAL(3,1)"),
    ("-21.50", "DECIMAL(3,1)"), ("1.10", "DECIMAL(2,1)"), ("-0.0", "DECIMAL(1,0)"),
    ("0.00", "DECIMAL(1,0)"), ("100.0", "DECIMAL(3,0)"), ("0.001", "DECIMAL(3,3)"),
    ("100000000000000000000.0", "DECIMAL(21,0)"),
    ("1234567890123456789012345678901234567.8", "DECIMAL(38,1)"),
    ("12345678901234567890123456789012345678.9", "DOUBLE"),
    ("0." + "0" * 37 + "1", "DECIMAL(38,38)"), ("0." + "0" * 38 + "1", "DOUBLE"),
    ("1." + "0" * 37, "DECIMAL(1,0)"), ("1." + "0" * 38, "DOUBLE"),
    ("0." + "0" * 38, "DECIMAL(1,0)"), ("0." + "0" * 39, "DOUBLE"),
    ("1e5", "DOUBLE"), ("1E5", "DOUBLE"), ("1e-5", "DOUBLE"), ("1.0e0", "DOUBLE"),
    ("0e0", "DOUBLE"), ("1e400", "DOUBLE"), ("5e-324", "DOUBLE"),
    ('"s"', "STRING"), ('"21.5"', "STRING"), ("true", "BOOLEAN"), ("null", "VOID"),
    ("[]", "ARRAY<VOID>"), ("{}", "OBJECT<>"), ("[null]", "ARRAY<VOID>"),
    ("[1,2]", "ARRAY<BIGINT>"), ("[1, null]", "ARRAY<BIGINT>"), ('[1,"a"]', "ARRAY<VARIANT>"),
    ("[true, 1]", "ARRAY<VARIANT>"), ('[{"a":1}, [1]]', "ARRAY<VARIANT>"),
    ("[1,1.5]", "ARRAY<DECIMAL(21,1)>"), ("[1.5,2.25]", "ARRAY<DECIMAL(3,2)>"),
    ("[-0.5, 0.25]", "ARRAY<DECIMAL(2,2)>"), ("[9223372036854775808, 1]", "ARRAY<DECIMAL(20,0)>"),
    ("[9223372036854775808, 1.5]", "ARRAY<DECIMAL(20,1)>"),
    ("[0.000000000000000001, 1]", "ARRAY<DECIMAL(38,18)>"),
    ("[0.0000000000000000001, 1]", "ARRAY<DOUBLE>"), ("[" + "9" * 38 + ", 0.5]", "ARRAY<DOUBLE>"),
    ("[1e5,1]", "ARRAY<DOUBLE>"), ("[1.5,1e5]", "ARRAY<DOUBLE>"),
    ("[[1],[2,3]]", "ARRAY<ARRAY<BIGINT>>"), ('[[1],["a"]]', "ARRAY<ARRAY<VARIANT>>"),
    ("[[],[1]]", "ARRAY<ARRAY<BIGINT>>"), ("[[null],[[1]]]", "ARRAY<ARRAY<ARRAY<BIGINT>>>"),
    ('[{"a":1},{"b":2}]', "ARRAY<OBJECT<a: BIGINT, b: BIGINT>>"),
    ('[{"a":1},{"a":"x"}]', "ARRAY<OBJECT<a: VARIANT>>"),
    ('[{"a":1},{"a":1.5}]', "ARRAY<OBJECT<a: DECIMAL(21,1)>>"),
    ('[{}, {"a":1}]', "ARRAY<OBJECT<a: BIGINT>>"),
    ('[{"a":{"x":1}}, {"a":{"y":"s"}}]', "ARRAY<OBJECT<a: OBJECT<x: BIGINT, y: STRING>>>"),
    ('{"b":1,"a":2}', "OBJECT<a: BIGINT, b: BIGINT>"), ('{"a":null}', "OBJECT<a: VOID>"),
    ('{"B":1,"a":2,"_":3,"1":4}', "OBJECT<`1`: BIGINT, B: BIGINT, _: BIGINT, a: BIGINT>"),
    ('{"a b":1,"a`b":2,"`":3,"":4}',
     "OBJECT<``: BIGINT, ````: BIGINT, `a b`: BIGINT, `a``b`: BIGINT>"),
    ('{"x1":1,"_x":2,"SELECT":3,"1a":4,"a-b":5,"a.b":6}',
     "OBJECT<`1a`: BIGINT, SELECT: BIGINT, _x: BIGINT, `a-b`: BIGINT, `a.b`: BIGINT, "
     "x1: BIGINT>"),
    ('{"\u00e9":1,"a\\nb":2}', "OBJECT<`a\nb`: BIGINT, `\u00e9`: BIGINT>"),
    ('{"\U0001f600":1,"\uffff":2,"\ue000":3,"z":4}',
     "OBJECT<z: BIGINT, `\U0001f600`: BIGINT, `\ue000`: BIGINT, `\uffff`: BIGINT>"),
    ('{"z":[],"y":{}}', "OBJECT<y: OBJECT<>, z: ARRAY<VOID>>"),
]  # fmt: skip


@pytest.mark.parametrize("text, spark_type", SPARK_TYPES)
def test_json_types_are_sparks(text, spark_type):
    from edgebus.ingest.views.json_types import loads, schema_of

    value, end = loads(text)
    assert end == len(text) and schema_of(value) == spark_type
    # Inside an object payload (payload_map's from_json), the same.
    from edgebus.ingest.views.arrow import payload_types

    assert payload_types('{"k":%s}' % text) == [("k", spark_type)]


# Payloads -> payload_map's entries (key=schema_of_variant), as pyspark 4.3 gave
# them; None: no map.
SPARK_PAYLOADS = [
    ('{"a":1}', ["a=BIGINT"]), (' {"a":1}', ["value=OBJECT<a: BIGINT>"]),
    ('{"a":1} x', ["a=BIGINT"]), ('{"a":1}]', ["a=BIGINT"]), ("{bad", None), ("hello", None),
    ("", None), ("1", ["value=BIGINT"]), ('"s"', ["value=STRING"]), ("null", ["value=VOID"]),
    ("[1,2]", ["value=ARRAY<BIGINT>"]), ("{}", []), ("  1  ", ["value=BIGINT"]),
    ("1 2", ["value=BIGINT"]), ("1x", None), ("1]", None), ("truex", None),
    ("true x", ["value=BOOLEAN"]), ("[1]x", ["value=ARRAY<BIGINT>"]), ('"s"x', ["value=STRING"]),
    ("\t1", ["value=BIGINT"]), ("\x0b1", None), (" ", None),
    ('{"a":1,"a":2}', ["a=BIGINT", "a=BIGINT"]), ('{"a":{"b":1,"b":2}}', None),
    ('[{"a":1,"a":2}]', None), ('{"a":NaN}', ["a=DOUBLE"]),
    ('{"a":[-Infinity]}', ["a=ARRAY<DOUBLE>"]),
    ("NaN", None), ("[NaN]", None), ('{"a":01}', None), ('{"a":1,}', None),
    ('{"a":"x\ty"}', None), ('{"a":"\\u0000"}', ["a=STRING"]), ('{"a":"\\ud83d"}', None),
    ('"\\ud83d"', None), ('{"\\ud83d\\ude00":1}', ["\U0001f600=BIGINT"]),
    ("1" * 1001, None), ('{"a":%s}' % ("1" * 1001), None), ("\ufeff{}", None), (None, None),
]  # fmt: skip


@pytest.mark.parametrize("payload, entries", SPARK_PAYLOADS)
def test_payload_types_are_payload_maps(payload, entries):
    from edgebus.ingest.views.arrow import payload_types

    got = payload_types(payload)
    assert (None if got is None else ["%s=%s" % e for e in got]) == entries
