"""What a job does when the service refuses its model as unknown (renamed while the bot runs).

The runner's :class:`~framecast.jobs.renamed_models.UnknownModels`, answered with the one model rule
(:mod:`framecast.app.model_choice`): the service's list is read again at once with the job's key
(:meth:`ModelCache.refresh_now`, at most once a minute per key); a job that used a default then
gets the model a job with no pick gets now, and a member's pick fails naming the models offered now.
"""

from __future__ import annotations

from collections.abc import Callable

from framecast.app.model_choice import ModelChoice, ModelSource, model_after_refusal, models_listing
from framecast.guilds.settings import Policy
from framecast.jobs.renamed_models import ModelsNow, TryModel
from framecast.service import GenerationClient
from framecast.service.model_list import ModelCache
from framecast.values import Job, JobKind

__all__ = ["ModelRenames"]


class ModelRenames:
    """Judges a job whose model the service refused, after reading the service's list again."""

    def __init__(self, models: ModelCache, policy_for: Callable[[int], Policy]) -> None:
        """`models`: the service's list; `policy_for`: a server's policy (its default models)."""
        self._models = models
        self._policy_for = policy_for

    def __repr__(self) -> str:
        return f"<ModelRenames models={self._models!r}>"

    async def after_refusal(self, job: Job, client: GenerationClient) -> TryModel | ModelsNow | None:
        """Read the list again with `client`'s key, then: a default job's next model, a pick's
        failure with the models offered now, or ``None`` (the list does not bear the refusal out)."""
        await self._models.refresh_now(client)
        kind = job.kind.value
        listed = self._models.ids(kind)
        failed = str(job.params.get("model", ""))
        source = ModelChoice.of_params(job.params)
        if source is ModelSource.PICKED:
            return ModelsNow(models_listing(listed)) if listed and failed not in listed else None
        server = self._policy_for(job.guild_id).settings
        model = model_after_refusal(
            failed,
            source,
            server_default=server.video_model if job.kind is JobKind.VIDEO else server.image_model,
            operator_default=self._models.default(kind),
            listed=listed,
        )
        return TryModel(model) if model is not None else None
