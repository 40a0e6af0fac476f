"""The history server: serves the Ray Dashboard API for stored and live sessions."""
