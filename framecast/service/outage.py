"""The generation service's outages as this process meets them: one WARNING, one INFO, a metric.

"The service" is the one external service at ``GEN_API_BASE_URL``: every key's client talks to
it, so its outages are tracked once per process, not once per key or per request. The accounts
give every key's :class:`~framecast.service.client.GenerationClient` the same
:class:`ServiceOutage`, and its transport reports every exchange with the service's own origin to
it (results fetched from other hosts are not the service). What counts:

* **The service does not answer** (an outage): no status line came (a connection refused or reset,
  DNS, a timeout), or a gateway says the service behind it is not there (502, 503, 504).
* **The service answers**: any other status, 2xx to 5xx. A 429, a 401 or another 4xx, even a 500,
  is the service's answer to that one request: it is retried or refused per request as before,
  and it ends an outage.

:meth:`ServiceOutage.failed` logs one WARNING when the first failure is met, and
:meth:`ServiceOutage.answered` one INFO when the service answers again, with how long it was out;
``framecast_service_unreachable`` and ``framecast_service_outages`` say it in the metrics. The
retries of each request are the transport's business and log at DEBUG; a request that gives up is
said once by whoever asked for it (the runner's "create deferred", "result not fetched yet").

Requests overlap, so an event counts only if its request was sent after what it would overturn: a
failure of a request sent before another one got an answer opens no outage (the service answered
since), and an answer to a request sent before the outage's first failed one does not end it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import yarl

from framecast.clock import Clock

if TYPE_CHECKING:
    from framecast.ops.metrics import Metrics

__all__ = ["UNREACHABLE_STATUSES", "ServiceOutage"]

log = logging.getLogger(__name__)

#: Statuses that say the service itself is not there (a gateway in front of it answered).
UNREACHABLE_STATUSES = frozenset({502, 503, 504})


class ServiceOutage:
    """This process's view of the service at `base_url` (see the module docstring).

    `clock` measures when requests were sent and how long an outage lasted (the transport's clock);
    `metrics` (None: not recorded) gets each outage's start and end.
    """

    def __init__(self, base_url: str, *, clock: Clock, metrics: Metrics | None = None) -> None:
        self.clock = clock
        self.metrics = metrics
        self._where = _origin(base_url)
        self._since: float | None = None  # when the outage's first failed request was sent; None: none now
        self._answered = float("-inf")  # when the latest request that got an answer was sent

    def __repr__(self) -> str:
        return f"<ServiceOutage {self._where} down={self.down}>"

    @property
    def down(self) -> bool:
        """Whether an outage is on (a failure met, and no answer since to a request sent after it)."""
        return self._since is not None

    @staticmethod
    def is_unreachable(status: int | None) -> bool:
        """Whether an exchange that ended with `status` (None: no status line) says the service is out."""
        return status is None or status in UNREACHABLE_STATUSES

    def failed(self, sent: float, problem: str) -> None:
        """A request sent at `sent` (this clock's monotonic) got no answer: `problem` says why.

        The first such failure since the service last answered logs the WARNING; later ones, and
        one whose request was sent before another request got an answer, say nothing.
        """
        if self._since is not None or sent < self._answered:
            return
        self._since = sent
        log.warning(
            "the generation service at %s does not answer (%s); its requests are retried and jobs "
            "wait until it answers again",
            self._where,
            problem,
        )
        if self.metrics is not None:
            self.metrics.service_outage(down=True)

    def answered(self, sent: float) -> None:
        """A request sent at `sent` got the service's answer: it ends an outage begun before it was sent."""
        self._answered = max(self._answered, sent)
        if self._since is None or sent < self._since:
            return
        lasted = max(0.0, self.clock.monotonic() - self._since)
        self._since = None
        log.info("the generation service at %s answers again, after %.1fs", self._where, lasted)
        if self.metrics is not None:
            self.metrics.service_outage(down=False)


def _origin(base_url: str) -> str:
    """The service's scheme, host and port, fit for a log line (no user, password, path or query)."""
    try:
        return str(yarl.URL(base_url).origin())
    except ValueError:
        return "the configured address"
