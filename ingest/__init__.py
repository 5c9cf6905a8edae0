"""Spark ingestion of the bridge telemetry log (host only)."""
