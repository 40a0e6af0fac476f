"""Entry point Pulumi runs for ``--policy-pack infra/policy``."""

import sys
from pathlib import Path

# Pulumi starts the pack from this directory; the validators live in the ``infra`` package.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pulumi_policy import EnforcementLevel, PolicyPack

from infra.policy.pack import PACK_NAME, build_policies

PolicyPack(name=PACK_NAME, policies=build_policies(), enforcement_level=EnforcementLevel.MANDATORY)
