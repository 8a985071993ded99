"""Which model a job gets: the one owner of that rule.

A member may pick a model (checked against the service's list); with none, the server's default is
used while the service still lists it; otherwise the operator's default, or its stand-in from the
service's list (:meth:`framecast.service.model_list.ModelCache.default`). /video, /image, Retry,
Again, Remix and /settings all ask here, so a refusal lists the same models everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from framecast.app.problems import IntakeError, IntakeProblem
from framecast.service.model_list import is_model_id

__all__ = [
    "LISTED_MODELS",
    "ModelChoice",
    "ModelSource",
    "check_model",
    "choose_model",
    "model_after_refusal",
    "models_listing",
    "server_default_usable",
]

#: At most this many model ids are listed when a pick is refused (a message holds 2000 characters).
LISTED_MODELS = 15
#: At most this many characters of model ids name the models offered now in a failed job's reason.
LISTING_CHARS = 280


class ModelSource(StrEnum):
    """Where a job's model came from (decides what Retry, Again and Remix take next time)."""

    PICKED = "picked"  # the member typed it: kept as is
    SERVER_DEFAULT = "server_default"  # the server's default: Again/Remix take the default of the moment
    OPERATOR_DEFAULT = "operator_default"  # the operator's (or the service's stand-in): likewise


@dataclass(frozen=True)
class ModelChoice:
    """The model a job gets, and why."""

    model: str
    source: ModelSource

    def params(self) -> dict[str, Any]:
        """The job parameters that record the choice (the shapes stored jobs already carry)."""
        if self.source is ModelSource.PICKED:
            return {"model": self.model, "model_default": False}
        if self.source is ModelSource.SERVER_DEFAULT:
            return {"model": self.model, "model_default": False, "model_server_default": True}
        return {"model": self.model, "model_default": True}

    @staticmethod
    def of_params(params: dict[str, Any]) -> ModelSource:
        """How a stored job's model was chosen."""
        if params.get("model_default"):
            return ModelSource.OPERATOR_DEFAULT
        if params.get("model_server_default"):
            return ModelSource.SERVER_DEFAULT
        return ModelSource.PICKED


def check_model(model: str, listed: Sequence[str]) -> str:
    """`model` as typed, stripped, if the service lists it (or, with no list yet, if it looks like an id).

    Autocomplete values are not validated by Discord, so this is the check. Raises
    :class:`IntakeError` (``UNKNOWN_MODEL`` or ``UNLISTED_MODEL`` with the listed models).
    """
    model = model.strip()
    if not is_model_id(model):
        raise IntakeError(IntakeProblem.UNKNOWN_MODEL, model=model[:100])
    if listed and model not in listed:
        raise IntakeError(IntakeProblem.UNLISTED_MODEL, model=model, models=", ".join(listed[:LISTED_MODELS]))
    return model


def server_default_usable(server_default: str | None, listed: Sequence[str]) -> bool:
    """Whether the server's default model may be used (the service lists it, or no list is known)."""
    return (
        server_default is not None
        and is_model_id(server_default)
        and (not listed or server_default in listed)
    )


def choose_model(
    picked: str | None, *, server_default: str | None, operator_default: str, listed: Sequence[str]
) -> ModelChoice:
    """The model a job gets: the member's pick (checked), else the server's default, else the operator's.

    `operator_default` is the operator's configured model or its stand-in from the service's list
    (``ModelCache.default``); `listed` is the service's current list for the job's kind.
    """
    if picked is not None:
        return ModelChoice(check_model(picked, listed), ModelSource.PICKED)
    if server_default_usable(server_default, listed):
        assert server_default is not None
        return ModelChoice(server_default, ModelSource.SERVER_DEFAULT)
    # From the configuration or the service's own list (also when the service dropped the server's
    # default model): no member to refuse.
    return ModelChoice(operator_default, ModelSource.OPERATOR_DEFAULT)


def models_listing(listed: Sequence[str]) -> tuple[str, ...]:
    """The models named when a job's model is gone: /models' list in its order, whole ids only,
    at most :data:`LISTED_MODELS` of them in :data:`LISTING_CHARS` characters (``", "``-separated)."""
    shown: list[str] = []
    used = 0
    for model in listed[:LISTED_MODELS]:
        used += len(model) + (2 if shown else 0)
        if used > LISTING_CHARS:
            break
        shown.append(model)
    return tuple(shown)


def model_after_refusal(
    failed: str,
    source: ModelSource,
    *,
    server_default: str | None,
    operator_default: str,
    listed: Sequence[str],
) -> str | None:
    """The model a job tries once more after the service refused `failed` as unknown, or ``None``.

    `listed` is the service's list read again after the refusal. ``None`` when the list does not
    bear the refusal out (`failed` is still listed, or nothing is known), when the member picked
    `failed` (a pick is never swapped behind their back), or when the rule picks `failed` again.
    Otherwise a default job gets what :func:`choose_model` gives a job with no pick now: the
    server's default while listed, else the operator's (the newest of its family the service lists).
    """
    if not listed or failed in listed or source is ModelSource.PICKED:
        return None
    chosen = choose_model(
        None, server_default=server_default, operator_default=operator_default, listed=listed
    ).model
    return chosen if chosen != failed else None
