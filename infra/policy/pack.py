"""The pack's policies: each validator of :mod:`infra.policy.rules` as a mandatory
``ResourceValidationPolicy``."""

from __future__ import annotations

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    ReportViolation,
    ResourceValidation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from infra.policy.rules import RULES, Rule

PACK_NAME = "ray-history-guardrails"


def _validator(rule: Rule) -> ResourceValidation:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        for message in rule(args.resource_type, args.props):
            report_violation(message, args.urn)

    return validate


def build_policies() -> list[Policy]:
    return [
        ResourceValidationPolicy(
            name=name,
            description=description,
            validate=_validator(rule),
            enforcement_level=EnforcementLevel.MANDATORY,
        )
        for name, description, rule in RULES
    ]
