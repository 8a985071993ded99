"""Telling a concurrency refusal from a rate refusal, for the creates of one key.

Many services refuse a create (429) while the key already runs as many tasks as they allow at once,
and still answer its polls. Such a refusal is not about the key's rate: pausing the whole budget
for it (as for a rate refusal) would hold back the very polls that free a slot, and retrying the
create at once would only be refused again. Two things tell them apart:

* **What the answer says**: a 429 whose body (any shape: a JSON message, an error code or type,
  plain text) says the key runs too many tasks at once (:func:`~framecast.service.errors.says_too_many_tasks`).
* **What the key's other requests meet**: creates refused while the polls between them pass. A
  429 on a create whose body says nothing either way ("Rate limit exceeded", or nothing at all) is
  a rate refusal the first time; the next one is a concurrency refusal when at least one request
  that is not a create went through since the previous one and none was refused. Once a
  concurrency refusal is known, later ambiguous create refusals are taken as such too, until a
  request that is not a create is refused (429): then the key's rate is what binds, and the
  evidence starts again.

A request that is not a create and meets a 429 is always a rate refusal (a concurrency cap refuses
only creates). One :class:`CreateRefusals` per key, kept by its transport; :func:`create_refusal`
says what a create that failed in the end was refused for (the runner asks it).
"""

from __future__ import annotations

import logging
import re

from framecast.service.errors import (
    RateLimited,
    RequestRejected,
    ServiceError,
    TooManyTasks,
    says_too_many_tasks,
)
from framecast.values.service_requests import RefusalKind

__all__ = ["CreateRefusals", "create_refusal"]

log = logging.getLogger(__name__)


class CreateRefusals:
    """The evidence, for one key, of which kind of refusal a create's 429 is (see the module)."""

    def __init__(self) -> None:
        self._refused_create = False  # a create was refused (429) since the evidence last restarted
        self._passed = 0  # requests (not creates) that went through since the last refused create
        self._known = False  # a concurrency refusal was established and no rate refusal seen since

    def __repr__(self) -> str:
        return f"<CreateRefusals known={self._known} passed={self._passed}>"

    def answered(self, status: int | None) -> None:
        """A request that is not a create got `status` (None: no answer)."""
        if status is None:
            return
        if status == 429:
            # The key's rate binds: what looked like a cap may have been the rate all along.
            self._known = False
            self._refused_create = False
            self._passed = 0
        elif 200 <= status < 300:
            self._passed += 1

    def classify(self, body: bytes | str) -> RefusalKind:
        """The kind of a create's 429 whose body (its beginning) is `body`."""
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        if says_too_many_tasks(text):
            kind = RefusalKind.CONCURRENCY
        elif self._known or (self._refused_create and self._passed > 0):
            kind = RefusalKind.CONCURRENCY  # creates refused while the other requests pass
        else:
            kind = RefusalKind.RATE
        if kind is RefusalKind.CONCURRENCY and not self._known:
            log.info("the service refuses creates while polls pass: it caps the key's tasks at once")
        self._known = self._known or kind is RefusalKind.CONCURRENCY
        self._refused_create = True
        self._passed = 0
        return kind


_TOO_MANY_REQUESTS = re.compile(r"too\s+many\s+requests", re.IGNORECASE)


def create_refusal(exc: ServiceError) -> RefusalKind | None:
    """What a create that failed for good (after the client's retries) was refused for.

    :class:`TooManyTasks`, or another refusal (a 4xx) whose words say the key runs too many tasks:
    a concurrency refusal. Any other 429, or a 4xx saying "too many requests": a rate refusal.
    None: not a refusal of either kind (a bad request, the service down...).
    """
    if isinstance(exc, TooManyTasks):
        return RefusalKind.CONCURRENCY
    if isinstance(exc, RequestRejected):
        if says_too_many_tasks(exc.detail):
            return RefusalKind.CONCURRENCY
        return RefusalKind.RATE if _TOO_MANY_REQUESTS.search(exc.detail or "") else None
    return RefusalKind.RATE if isinstance(exc, RateLimited) else None
