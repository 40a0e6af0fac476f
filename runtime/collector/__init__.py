"""The collector sidecar: ships Ray events, logs and dashboard snapshots to storage."""
