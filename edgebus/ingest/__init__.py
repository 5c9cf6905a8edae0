"""Spark ingestion of the bridge telemetry log (host only).

The `edgebus` data source (``source``: ``register``, the batch and stream
readers) over ``schema`` (its columns), ``offsets`` (log positions, options),
``planning`` (the ``ranges`` it cuts and packs into partitions), ``reading``
(a range to Arrow batches, with ``bodies`` and ``columns``) and ``corruption``
(what readers skip); ``job`` (`edgebus ingest`) and the tables it keeps
beside its own (``views``: typed views; ``audit``: the delivery audit);
``report`` (`edgebus report`), ``helpers`` (typed values from the JSON
columns).  docs/spark.md documents it all.
"""
