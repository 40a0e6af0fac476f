"""Closed JSON schemas of the scrape kinds :mod:`ray_history_pulumi.metrics` creates.

No package we install ships these CRDs, so their field names and types are transcribed
(closed: a misspelt field fails, as the API server would silently prune it):

* ``PodMonitor`` and ``ServiceMonitor`` (``monitoring.coreos.com/v1``): prometheus-operator,
  ``pkg/apis/monitoring/v1/podmonitor_types.go`` (``PodMonitorSpec``, ``PodMetricsEndpoint``),
  ``servicemonitor_types.go`` (``ServiceMonitorSpec``, ``Endpoint``), ``types.go``
  (``RelabelConfig``, ``NamespaceSelector``), as shipped in kube-prometheus-stack's
  ``charts/crds/crds/crd-podmonitors.yaml`` / ``crd-servicemonitors.yaml``.
* ``PodMonitor`` (``azmonitoring.coreos.com/v1``): Azure Monitor's managed Prometheus add-on
  installs prometheus-operator's PodMonitor CRD under its own group
  (https://learn.microsoft.com/azure/azure-monitor/containers/prometheus-metrics-scrape-crd),
  so the same schema applies.
* ``PodMonitoring`` (``monitoring.googleapis.com/v1``): GoogleCloudPlatform/prometheus-engine,
  ``charts/operator/crds/monitoring.googleapis.com_podmonitorings.yaml`` (``ScrapeEndpoint``,
  ``TargetLabels``, ``LabelMapping``; ``endpoints`` and ``selector`` required).
"""

from __future__ import annotations

from typing import Any

import jsonschema  # type: ignore[import-untyped]


def _closed(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


_STR = {"type": "string"}
_INT = {"type": "integer"}
_BOOL = {"type": "boolean"}
_STR_MAP = {"type": "object", "additionalProperties": _STR}
_STR_LIST = {"type": "array", "items": _STR}
_INT_OR_STR = {"type": ["integer", "string"]}
_LABEL_NAME = {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"}
# Prometheus durations as the operator's CRDs constrain them.
_DURATION = {
    "type": "string",
    "pattern": "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_METADATA = _closed(
    {"name": _STR, "namespace": _STR, "labels": _STR_MAP, "annotations": _STR_MAP}, ("name", "namespace")
)
_LABEL_SELECTOR = _closed(
    {
        "matchLabels": _STR_MAP,
        "matchExpressions": {
            "type": "array",
            "items": _closed({"key": _STR, "operator": _STR, "values": _STR_LIST}, ("key", "operator")),
        },
    }
)
_ACTIONS = [
    spelled
    for action in (
        "replace",
        "keep",
        "drop",
        "hashmod",
        "labelmap",
        "labeldrop",
        "labelkeep",
        "lowercase",
        "uppercase",
        "keepequal",
        "dropequal",
    )
    for spelled in (
        action,
        {
            "hashmod": "HashMod",
            "labelmap": "LabelMap",
            "labeldrop": "LabelDrop",
            "labelkeep": "LabelKeep",
            "keepequal": "KeepEqual",
            "dropequal": "DropEqual",
        }.get(action, action.capitalize()),
    )
]
_RELABEL = _closed(
    {
        "sourceLabels": {"type": "array", "items": _LABEL_NAME},
        "separator": _STR,
        "targetLabel": _STR,
        "regex": _STR,
        "modulus": _INT,
        "replacement": _STR,
        "action": {"enum": _ACTIONS},
    }
)
_RELABELS = {"type": "array", "items": _RELABEL}
_NAMESPACE_SELECTOR = _closed({"any": _BOOL, "matchNames": _STR_LIST})
_SCHEME = {"enum": ["http", "https", "HTTP", "HTTPS"]}
_ENDPOINT_COMMON: dict[str, Any] = {
    "path": _STR,
    "scheme": _SCHEME,
    "params": {"type": "object", "additionalProperties": _STR_LIST},
    "interval": _DURATION,
    "scrapeTimeout": _DURATION,
    "honorLabels": _BOOL,
    "honorTimestamps": _BOOL,
    "trackTimestampsStaleness": _BOOL,
    "relabelings": _RELABELS,
    "metricRelabelings": _RELABELS,
    "followRedirects": _BOOL,
    "enableHttp2": _BOOL,
    "filterRunning": _BOOL,
    "proxyUrl": _STR,
    "tlsConfig": {"type": "object"},
    "bearerTokenSecret": {"type": "object"},
    "authorization": {"type": "object"},
    "basicAuth": {"type": "object"},
    "oauth2": {"type": "object"},
}
_POD_METRICS_ENDPOINT = _closed({**_ENDPOINT_COMMON, "port": _STR, "portNumber": _INT, "targetPort": _INT_OR_STR})
_SERVICE_ENDPOINT = _closed({**_ENDPOINT_COMMON, "port": _STR, "targetPort": _INT_OR_STR, "bearerTokenFile": _STR})
_MONITOR_COMMON: dict[str, Any] = {
    "jobLabel": _STR,
    "podTargetLabels": _STR_LIST,
    "selector": _LABEL_SELECTOR,
    "namespaceSelector": _NAMESPACE_SELECTOR,
    "sampleLimit": _INT,
    "targetLimit": _INT,
    "labelLimit": _INT,
    "labelNameLengthLimit": _INT,
    "labelValueLengthLimit": _INT,
    "attachMetadata": _closed({"node": _BOOL}),
    "scrapeClass": _STR,
    "scrapeProtocols": _STR_LIST,
}
_POD_MONITOR_SPEC = _closed(
    {**_MONITOR_COMMON, "podMetricsEndpoints": {"type": "array", "items": _POD_METRICS_ENDPOINT}}, ("selector",)
)
_SERVICE_MONITOR_SPEC = _closed(
    {**_MONITOR_COMMON, "targetLabels": _STR_LIST, "endpoints": {"type": "array", "items": _SERVICE_ENDPOINT}},
    ("selector",),
)
_GMP_RELABEL = _closed(
    {
        "action": {
            "enum": [
                "replace",
                "lowercase",
                "uppercase",
                "keep",
                "drop",
                "keepequal",
                "dropequal",
                "hashmod",
                "labeldrop",
                "labelkeep",
            ]
        },
        "modulus": _INT,
        "regex": _STR,
        "replacement": _STR,
        "separator": _STR,
        "sourceLabels": {"type": "array", "items": _LABEL_NAME, "maxItems": 100},
        "targetLabel": _LABEL_NAME,
    }
)
_GMP_ENDPOINT = _closed(
    {
        "port": _INT_OR_STR,
        "scheme": _STR,
        "path": _STR,
        "params": {"type": "object", "additionalProperties": _STR_LIST},
        "interval": _STR,
        "timeout": _STR,
        "metricRelabeling": {"type": "array", "items": _GMP_RELABEL, "maxItems": 250},
        "authorization": {"type": "object"},
        "basicAuth": {"type": "object"},
        "oauth2": {"type": "object"},
        "proxyUrl": _STR,
        "tls": {"type": "object"},
    },
    ("port",),
)
_GMP_SPEC = _closed(
    {
        "endpoints": {"type": "array", "items": _GMP_ENDPOINT},
        "selector": _LABEL_SELECTOR,
        "filterRunning": _BOOL,
        "limits": _closed({"samples": _INT, "labels": _INT, "labelNameLength": _INT, "labelValueLength": _INT}),
        "targetLabels": _closed(
            {
                "metadata": {
                    "type": "array",
                    "items": {
                        "enum": ["container", "node", "pod", "top_level_controller", "top_level_controller_type"]
                    },
                },
                "fromPod": {"type": "array", "items": _closed({"from": _STR, "to": _LABEL_NAME}, ("from",))},
            }
        ),
    },
    ("endpoints", "selector"),
)


def _object(api_version: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return _closed(
        {"apiVersion": {"const": api_version}, "kind": {"const": kind}, "metadata": _METADATA, "spec": spec},
        ("apiVersion", "kind", "metadata", "spec"),
    )


SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("monitoring.coreos.com/v1", "PodMonitor"): _object("monitoring.coreos.com/v1", "PodMonitor", _POD_MONITOR_SPEC),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): _object(
        "monitoring.coreos.com/v1", "ServiceMonitor", _SERVICE_MONITOR_SPEC
    ),
    ("azmonitoring.coreos.com/v1", "PodMonitor"): _object(
        "azmonitoring.coreos.com/v1", "PodMonitor", _POD_MONITOR_SPEC
    ),
    ("monitoring.googleapis.com/v1", "PodMonitoring"): _object(
        "monitoring.googleapis.com/v1", "PodMonitoring", _GMP_SPEC
    ),
}


def validate_scrape_object(obj: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``obj`` matches its kind's closed schema."""
    key = (str(obj.get("apiVersion")), str(obj.get("kind")))
    if key not in SCHEMAS:
        raise ValueError(f"no schema for {key}; known: {sorted(SCHEMAS)}")
    jsonschema.Draft7Validator(SCHEMAS[key]).validate(obj)
