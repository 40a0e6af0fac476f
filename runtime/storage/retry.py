"""Retry policy for storage calls: exponential backoff with full jitter.

Backends classify every SDK exception as not-found, permanent or transient; only
transient ones are retried here. SDK-level retries are switched off so that one
policy, with one budget, governs every call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)
from tenacity.stop import stop_base

T = TypeVar("T")

logger = logging.getLogger(__name__)


class TransientError(Exception):
    """Internal marker wrapping an SDK error that is worth retrying."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


@dataclass(frozen=True)
class RetryPolicy:
    """How hard a storage call tries before raising StorageUnavailableError.

    Attributes:
        attempts: total attempts, including the first (1 disables retries).
        initial_delay: upper bound of the first backoff, in seconds.
        max_delay: cap for any single backoff, in seconds.
        deadline: stop retrying once this many seconds have passed since the first
            attempt (0 = no deadline, only ``attempts`` applies).
    """

    attempts: int = 6
    initial_delay: float = 0.2
    max_delay: float = 5.0
    deadline: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("RetryPolicy.attempts must be >= 1")
        if self.initial_delay < 0 or self.max_delay < 0 or self.deadline < 0:
            raise ValueError("RetryPolicy delays must be >= 0")

    def call(self, fn: Callable[[], T], *, describe: str, before_retry: Callable[[], None] | None = None) -> T:
        """Run ``fn``, retrying while it raises :class:`TransientError`.

        ``before_retry`` runs before each new attempt (e.g. rewind a stream).
        The last TransientError propagates when the budget is spent.
        """
        stop: stop_base = stop_after_attempt(self.attempts)
        if self.deadline > 0:
            stop = stop | stop_after_delay(self.deadline)

        def _log_and_prepare(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            logger.warning(
                "storage %s failed (attempt %d/%d), retrying: %s",
                describe,
                state.attempt_number,
                self.attempts,
                exc,
            )
            if before_retry is not None:
                before_retry()

        retrying = Retrying(
            retry=retry_if_exception_type(TransientError),
            stop=stop,
            wait=wait_random_exponential(multiplier=self.initial_delay, max=self.max_delay),
            before_sleep=_log_and_prepare,
            reraise=True,
        )
        return retrying(fn)


NO_RETRY = RetryPolicy(attempts=1, deadline=0)
