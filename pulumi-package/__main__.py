"""Hosts the components of ``ray_history_pulumi.package`` as the Pulumi package ``ray-history``."""

from pulumi.provider.experimental import component_provider_host

from ray_history_pulumi.package import COMPONENTS, PACKAGE_NAME

if __name__ == "__main__":
    component_provider_host(components=COMPONENTS, name=PACKAGE_NAME)
