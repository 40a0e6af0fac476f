"""Kubeconfigs of the turnkey clusters: ``exec`` credential plugins, never a short-lived token."""

from __future__ import annotations

import json
from collections.abc import Sequence


def exec_kubeconfig(name: str, server: str, ca_data: str, command: str, exec_args: Sequence[str]) -> str:
    """A kubeconfig whose user runs a credential plugin (gke-gcloud-auth-plugin, aws eks get-token)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": ca_data}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
        "users": [
            {
                "name": name,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": command,
                        "args": list(exec_args),
                        "interactiveMode": "Never",
                        "provideClusterInfo": command == "gke-gcloud-auth-plugin",
                    }
                },
            }
        ],
    }
    return json.dumps(config, indent=2)
