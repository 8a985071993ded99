"""A create refused because the service no longer knows the job's model (renamed while the bot runs).

The runner asks :class:`UnknownModels` (the application implements it with the one model rule,
``framecast/app/model_renames.py``) what follows, after the service's list was read again: a job
that used a default is created once more on the model the rule picks now (:class:`TryModel`); a
job whose member picked the model fails, naming the models offered now (:class:`ModelsNow`); a
refusal the list does not bear out (the model is still listed) stays a plain rejection (``None``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from framecast.service import GenerationClient
from framecast.service.errors import ModelGone, UnknownModel
from framecast.values.job import Job

__all__ = ["ModelsNow", "TryModel", "UnknownModels", "next_model"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TryModel:
    """A default job: create it once more with `model`."""

    model: str


@dataclass(frozen=True)
class ModelsNow:
    """A picked model the service no longer offers: the job fails naming `listed` (maybe empty)."""

    listed: tuple[str, ...]


class UnknownModels(Protocol):
    """What a job does after the service refused its model (the application decides)."""

    async def after_refusal(self, job: Job, client: GenerationClient) -> TryModel | ModelsNow | None:
        """Read the model list again with `client`'s key (rate-limited) and judge `job`'s model.

        ``None``: the list does not bear the refusal out, or offers nothing else to try.
        """
        ...


async def next_model(
    models: UnknownModels | None, job: Job, client: GenerationClient, refused: UnknownModel, *, again: bool
) -> str:
    """The model `job` is created with once more, after `refused` (`again`: it was tried once more already).

    Raises `refused` (a plain rejection) when there is nothing else to try or the job had its one more
    try, and :class:`ModelGone` (with the models offered now) when the member picked the model.
    """
    verdict = await models.after_refusal(job, client) if models is not None and not again else None
    if isinstance(verdict, ModelsNow):
        raise ModelGone(refused.model, verdict.listed) from refused
    if verdict is None or verdict.model == refused.model:
        raise refused
    log.info("job %s: the service no longer knows %s; trying %s", job.id, refused.model, verdict.model)
    return verdict.model
