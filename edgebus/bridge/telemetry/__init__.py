"""The telemetry log's writer in the bridge: the appender (appender.py) over its
parts: what it takes from the bus (intake), a message as a record (records),
the writer's thread (sink), acknowledgements after a commit (acks), the
windows and the hold (flow), the operator's warnings (watch) and a failed
log's retry (health)."""
