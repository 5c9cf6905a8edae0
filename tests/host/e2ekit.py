"""Helpers shared by the end-to-end tests that run devices, bridges and the
ingest job (test_e2e_fleet_spark.py, test_e2e_failover.py)."""
import argparse

import tlog


def progress(log_dir, nodes):
    """{node: highest seq in a sealed segment of the log} (0 before the first)."""
    top = {n: 0 for n in nodes}
    for (link_id, _sid), seq in tlog.last_seqs(log_dir, max_bytes=None).items():
        node = link_id.split(":", 1)[1]
        if node in top:
            top[node] = max(top[node], seq)
    return top


def ingest_once(spark, log, table, ckpt):
    """`edgebus ingest --once` of log (a directory or a list of them) into table."""
    from ingest import job

    args = argparse.Namespace(log=log, table=table, checkpoint=ckpt, once=True,
                              watermark=job.DEFAULT_WATERMARK, trigger_interval=5.0,
                              max_records_per_trigger=None, max_bytes_per_trigger=None,
                              master=None)
    q = job.start(spark, args)
    q.awaitTermination()
    assert q.exception() is None
