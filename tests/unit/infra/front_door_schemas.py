"""Closed JSON schemas of the cloud controllers' own kinds the program creates on GKE.

No CRD bundle of these ships with a package we install, so the schemas are transcribed from
their sources (field names and types only; closed, so a misspelt field fails):

* ``BackendConfig`` (``cloud.google.com/v1``): kubernetes/ingress-gce,
  ``pkg/apis/backendconfig/v1/types.go`` (``BackendConfigSpec``, ``IAPConfig``,
  ``OAuthClientCredentials``, ``HealthCheckConfig``).
* ``FrontendConfig`` (``networking.gke.io/v1beta1``): kubernetes/ingress-gce,
  ``pkg/apis/frontendconfig/v1beta1/types.go`` (``RedirectToHttpsConfig``, ``sslPolicy``).
* ``ManagedCertificate`` (``networking.gke.io/v1``): GoogleCloudPlatform/gke-managed-certs,
  ``deploy/managedcertificates-crd.yaml`` (domains of at most 63 characters) and
  https://cloud.google.com/kubernetes-engine/docs/how-to/managed-certs (at most 100 domains,
  no wildcards).
"""

from __future__ import annotations

from typing import Any

import jsonschema  # type: ignore[import-untyped]


def _closed(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


_INT = {"type": "integer"}
_STR = {"type": "string"}
_METADATA = _closed({"name": _STR, "namespace": _STR, "labels": {"type": "object"}}, ("name", "namespace"))

_BACKEND_CONFIG_SPEC = _closed(
    {
        "iap": _closed(
            {
                "enabled": {"type": "boolean"},
                "oauthclientCredentials": _closed(
                    {"secretName": _STR, "clientID": _STR, "clientSecret": _STR}, ("secretName",)
                ),
            },
            ("enabled",),
        ),
        "cdn": {"type": "object"},
        "securityPolicy": _closed({"name": _STR}, ("name",)),
        "timeoutSec": _INT,
        "connectionDraining": _closed({"drainingTimeoutSec": _INT}),
        "sessionAffinity": _closed({"affinityType": _STR, "affinityCookieTtlSec": _INT}),
        "customRequestHeaders": _closed({"headers": {"type": "array", "items": _STR}}),
        "customResponseHeaders": _closed({"headers": {"type": "array", "items": _STR}}),
        "healthCheck": _closed(
            {
                "checkIntervalSec": _INT,
                "timeoutSec": _INT,
                "healthyThreshold": _INT,
                "unhealthyThreshold": _INT,
                "type": {"enum": ["HTTP", "HTTPS", "HTTP2"]},
                "port": _INT,
                "requestPath": {"type": "string", "pattern": "^/"},
            }
        ),
        "logging": _closed({"enable": {"type": "boolean"}, "sampleRate": {"type": "number"}}),
    }
)
_FRONTEND_CONFIG_SPEC = _closed(
    {
        "redirectToHttps": _closed({"enabled": {"type": "boolean"}, "responseCodeName": _STR}),
        "sslPolicy": _STR,
    }
)
_MANAGED_CERTIFICATE_SPEC = _closed(
    {
        "domains": {
            "type": "array",
            "minItems": 1,
            "maxItems": 100,
            "items": {
                "type": "string",
                "maxLength": 63,
                "pattern": r"^(([a-zA-Z0-9]+|[a-zA-Z0-9][-a-zA-Z0-9]*[a-zA-Z0-9])\.)+"
                r"[a-zA-Z][-a-zA-Z0-9]*[a-zA-Z0-9]\.?$",
            },
        }
    },
    ("domains",),
)

SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("cloud.google.com/v1", "BackendConfig"): _BACKEND_CONFIG_SPEC,
    ("networking.gke.io/v1beta1", "FrontendConfig"): _FRONTEND_CONFIG_SPEC,
    ("networking.gke.io/v1", "ManagedCertificate"): _MANAGED_CERTIFICATE_SPEC,
}


def validate_front_door(obj: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``obj`` (camelCase, as the engine sees it) is valid."""
    spec = SCHEMAS[(obj["apiVersion"], obj["kind"])]
    schema = _closed(
        {
            "apiVersion": {"const": obj["apiVersion"]},
            "kind": {"const": obj["kind"]},
            "metadata": _METADATA,
            "spec": spec,
        },
        ("apiVersion", "kind", "metadata", "spec"),
    )
    jsonschema.validate(obj, schema)
