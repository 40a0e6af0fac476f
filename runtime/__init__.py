"""Ray History Server for Kubernetes: collector, history server and storage layer."""

__version__ = "0.1.0"
