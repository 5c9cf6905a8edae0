"""What a refresh writes for one view: its columns (the declared ones, then
one per new payload key, typed from the batch's values), its typed rows, and
its rejects, each with the reason a value did not fit."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from edgebus.ingest.views import types as views_types
from edgebus.ingest.views.config import MAX_KEY, PROVENANCE, View
from edgebus.ingest.views.marks import Marks, above

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

    from edgebus.ingest.views.payloads import KeyTypes


class Plan(NamedTuple):
    view: View
    columns: list[list[str]]  # [name, payload key, DDL type] of every column
    new: list[str]  # the names of the columns this batch adds
    marks: Marks
    rej_marks: Marks
    rows: DataFrame
    rejects: DataFrame
    n: int  # rows matched above the lower of the two marks

    def summary(self, n_rows: int, n_rejects: int) -> str:
        s = "%s +%d rows" % (self.view.name, n_rows)
        if self.new:
            s += " (%d new column%s: %s)" % (
                len(self.new),
                "" if len(self.new) == 1 else "s",
                ", ".join(self.new),
            )
        return s + ", %d reject%s" % (n_rejects, "" if n_rejects == 1 else "s")


def plan(
    parsed: DataFrame,
    view: View,
    columns: list[list[str]],
    marks: Marks,
    rej_marks: Marks,
    types: KeyTypes,
) -> Plan:
    """What a refresh writes for one view, from its rows of the parsed set
    (``_m``: payload_map) and their key_types; columns gains the new ones."""
    from pyspark.sql import functions as F

    counts, n = types
    new = _add_columns(view, columns, counts)
    m = F.col("_m")
    p = F.col("payload")
    typed, bad_values = _typed(m, columns, counts)
    fails = [
        F.when(p.isNull(), _why("payload is null", None, None, F.lit(None))),
        # The log holds JSON; were it not, a row of nulls would say nothing.
        F.when(m.isNull(), _why("payload is not JSON", None, None, F.lit(None))),
        *bad_values,
        _key_without_column(m, view, columns),
    ]
    checked = parsed.withColumn("_bad", F.coalesce(*fails))
    rows = checked.where(F.col("_bad").isNull() & above(marks)).select(
        *typed, *[c for c in PROVENANCE if c not in ("peer_node", "date")], "peer_node", "date"
    )
    rejects = checked.where(F.col("_bad").isNotNull() & above(rej_marks)).select(
        F.lit(view.name).alias("view"), "_bad.*", "payload", *PROVENANCE
    )
    return Plan(view, columns, new, marks, rej_marks, rows, rejects, n)


def _add_columns(
    view: View, columns: list[list[str]], counts: dict[str, list[tuple[str, int]]]
) -> list[str]:
    """A column appended to columns for each payload key the view has none
    for, typed from its values; the new columns' names."""
    new = []
    taken = {c[0].lower() for c in columns} | set(PROVENANCE)
    keys = {c[1] for c in columns}
    for key in sorted(set(counts) - keys):
        ddl = views_types.infer(counts[key])
        name = key if key.lower() not in taken else "payload_" + key
        if ddl is None or _no_column(key, name, taken) or len(columns) >= view.max_columns:
            continue  # all null so far, or no room or name for it: its rows say so in rejects
        columns.append([name, key, views_types.type_ddl(views_types.from_ddl(ddl))])
        taken.add(name.lower())
        new.append(name)
    return new


def _typed(
    m: Column, columns: list[list[str]], counts: dict[str, list[tuple[str, int]]]
) -> tuple[list[Column], list[Column]]:
    """Each column's value cast to its type, and for each the reject reason
    of a value that does not fit it (null when it fits)."""
    from pyspark.sql import functions as F

    typed, fails = [], []
    for name, key, ddl in columns:
        v = m[key]
        dt = views_types.from_ddl(ddl)
        wrong = [
            t for t, _ in counts.get(key, []) if not views_types.fits(dt, views_types.parse(t))
        ]
        present = v.isNotNull() & ~F.is_variant_null(v)
        cast = F.try_variant_get(v, "$", ddl)
        bad = present & (F.schema_of_variant(v).isin(wrong) | cast.isNull())
        got = F.concat(F.lit("expected %s, got " % ddl), F.schema_of_variant(v))
        fails.append(F.when(bad, _why(got, name, ddl, F.to_json(v))))
        typed.append(cast.alias(name))
    return typed, fails


def _key_without_column(m: Column, view: View, columns: list[list[str]]) -> Column:
    """The reject reason of a row with a (non-null) payload key no column
    takes, naming the first such key; null when there is none."""
    from pyspark.sql import functions as F

    # The keys no column takes, as one expression whatever their number: one
    # per key made Spark generate code beyond its driver's heap for a device
    # that sent 500 invented keys.
    known = [c[1] for c in columns]
    left = F.filter(
        F.map_keys(m), lambda k: ~k.isin(*known) & ~F.is_variant_null(F.element_at(m, k))
    )
    k = F.element_at(left, 1)
    full = len(columns) >= view.max_columns
    why = (
        F.when((k == "") | k.contains("`"), F.lit("an empty name or a backtick"))
        .when(F.length(k) > MAX_KEY, F.lit("a name longer than %d" % MAX_KEY))
        .otherwise(
            F.lit("the view has its max_columns, %d" % view.max_columns)
            if full
            else F.lit("its name is taken")
        )
    )
    kname = F.substring(k, 1, MAX_KEY)
    text = F.concat(F.lit("key '"), kname, F.lit("' has no column ("), why, F.lit(")"))
    return F.when(F.size(left) > 0, _why(text, kname, None, F.to_json(F.element_at(m, k))))


def _no_column(key: str, name: str, taken: set[str]) -> str | None:
    """Why the payload key cannot be a column named name, or None."""
    if not key or "`" in key:
        return "an empty name or a backtick"
    if len(key) > MAX_KEY:
        return "a name longer than %d" % MAX_KEY
    return "its name is taken" if name.lower() in taken else None


def _why(reason: Any, column: Any, expected: str | None, value: Column) -> Column:
    from pyspark.sql import functions as F

    return F.struct(
        (F.lit(reason) if isinstance(reason, str) else reason).alias("reason"),
        F.lit(column).cast("string").alias("column"),
        F.lit(expected).cast("string").alias("expected"),
        value.cast("string").alias("value"),
    )


def view_columns(view: View, state: dict[str, Any]) -> list[list[str]]:
    """The view's columns: its state's, with the declared ones it lacks; a
    declared column whose type differs from the table's is an error."""
    columns: list[list[str]] = [list(c) for c in state.get("columns", [])]
    if state and state.get("topic") != view.topic:
        raise ValueError(
            "view %s: its table holds topic %s, the file says %s (remove the "
            "view's directory to rebuild it)" % (view.name, state["topic"], view.topic)
        )
    have = {c[0].lower(): c for c in columns}
    for f in _declared(view).fields:
        ddl = views_types.type_ddl(f.dataType)
        c = have.get(f.name.lower())
        if c is None:
            columns.append([f.name, f.name, ddl])
        elif views_types.from_ddl(c[2]) != f.dataType:
            raise ValueError(
                "view %s: column %s is %s in its table, the file says %s (a column keeps its "
                "type: remove the view's directory to rebuild it)" % (view.name, f.name, c[2], ddl)
            )
    return columns


def _declared(view: View) -> StructType:
    from pyspark.sql.types import StructType

    if not view.schema.strip():
        return StructType([])
    try:
        t = views_types.from_ddl(view.schema)
    except Exception as e:  # Spark's parse error: its first line says where
        raise ValueError(
            "view %s: bad schema %r: %s" % (view.name, view.schema, str(e).strip().splitlines()[0])
        ) from None
    if not isinstance(t, StructType):
        raise ValueError('view %s: schema must name its columns ("temp DOUBLE")' % view.name)
    return t
