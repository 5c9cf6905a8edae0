"""Spark ingestion of the bridge telemetry log (host only).

The `edgebus` data source (``source``: ``register``, the batch and stream
readers) over ``schema`` (its columns), ``offsets`` (log positions, options),
``planning`` (ranges and partitions), ``reading`` (a range to Arrow batches,
with ``bodies`` and ``columns``) and ``corruption`` (what readers skip);
``job`` (`edgebus ingest`), ``report`` (`edgebus report`), ``helpers``
(typed values from the JSON columns).  docs/spark.md documents it all.
"""
