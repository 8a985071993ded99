"""Operating the bot: Prometheus metrics and the HTTP endpoints for health, readiness and scrapes."""

from framecast.ops.http import Check, CheckOutcome, OpsServer
from framecast.ops.metrics import (
    OPERATOR_KEY,
    ActiveJobs,
    BudgetReading,
    JobCounts,
    Metrics,
    ReencodeOutcome,
    key_label,
)
from framecast.values.service_requests import RequestKind

__all__ = [
    "OPERATOR_KEY",
    "ActiveJobs",
    "BudgetReading",
    "Check",
    "CheckOutcome",
    "JobCounts",
    "Metrics",
    "OpsServer",
    "ReencodeOutcome",
    "RequestKind",
    "key_label",
]
