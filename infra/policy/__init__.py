"""The ``ray-history-guardrails`` policy pack (``pulumi preview --policy-pack infra/policy``)."""
