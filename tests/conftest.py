"""Suite-wide plugins: under CI, an unexpected skip fails the run (tests/support/skip_policy.py)."""

pytest_plugins = ("tests.support.skip_policy",)
