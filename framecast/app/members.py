"""What a member can do: request a video or an image, cancel, retry, again, remix, look at jobs and queues.

One use case per thing a member can do, on :class:`Members`: typed input, a typed outcome. A
request a member can fix raises :class:`~framecast.app.problems.IntakeError` (what is wrong with
it); an action on a job that is not possible raises :class:`JobRefused` (why not); everything else
returns a frozen record the Discord edge words.

Discord must hear back within 3 seconds, so a request comes in two phases: :meth:`Members.prepare`
(no I/O: where, whether and what) before the acknowledgement, :meth:`Members.submit` (persist,
queue, first show) after it. Who may act on a job is decided here, from the stored job (its
requester, or a member with Manage Server in the job's server), never from what a button carries.
Which model a job gets is decided by :mod:`framecast.app.model_choice` only.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from framecast.app.actors import Actor
from framecast.app.intake import Intake, Requester, is_personal_queue
from framecast.app.model_choice import ModelChoice, ModelSource, choose_model
from framecast.app.problems import IntakeError, IntakeProblem
from framecast.app.queue_view import (
    RUNNING_STATES,
    PromptHidden,
    QueueRow,
    QueueView,
    QueueViewer,
    as_seen_by,
    order_rows,
)
from framecast.app.requests import FormInput, JobOptions, options_from_form, options_of
from framecast.app.styles import Style, StyleBook, job_style, styled_params
from framecast.clock import Clock
from framecast.guilds.settings import Policy
from framecast.jobs.scheduler import CancelOutcome, Scheduler
from framecast.jobs.service_params import shareable_link
from framecast.planner.estimate import Estimate
from framecast.service.errors import ServiceError
from framecast.service.model_list import ModelCache
from framecast.storage import Store
from framecast.values import Deletion, Job, JobKind, JobState

__all__ = [
    "CancelResult",
    "JobAction",
    "JobDetails",
    "JobRefused",
    "KindModels",
    "MemberLimits",
    "Members",
    "ModelList",
    "Refusal",
    "RemixPrefill",
    "Request",
    "Requester",
    "ServiceError",  # a use case that asks the service (none of the members' today) may raise it
    "ShowsJobs",
    "Started",
    "is_personal_queue",
    # What the members' use cases take and return, from the modules that hold them:
    "FormInput",
    "JobOptions",
    "PromptHidden",
    "QueueRow",
    "QueueView",
    "QueueViewer",
    "RUNNING_STATES",
    "order_rows",
    "options_from_form",
    "options_of",
]

log = logging.getLogger(__name__)

#: The keys of a job's parameters that record its model (rewritten by :class:`ModelChoice`).
_MODEL_KEYS = ("model", "model_default", "model_server_default")


class ShowsJobs(Protocol):
    """What the members' use cases need of the chat side: show a job's current state."""

    async def job_changed(self, job: Job, *, urgent: bool = False) -> None:
        """Show the job's current state (`urgent`: now, not coalesced)."""
        ...


class JobAction(StrEnum):
    """What a member wants to do with an existing job."""

    SHOW = "show"  # /job: the requester or Manage Server
    CANCEL = "cancel"  # the requester or Manage Server
    RETRY = "retry"  # a failed job: the requester or Manage Server
    AGAIN = "again"  # a delivered job: any member, as a job of their own
    REMIX = "remix"  # likewise, with the options edited first
    DELETE = "delete"  # a delivered job's result message: the requester or Manage Server


#: Actions only the job's requester (or a server manager) may take.
_OWNER_ACTIONS = frozenset({JobAction.SHOW, JobAction.CANCEL, JobAction.RETRY, JobAction.DELETE})
#: Actions on a delivered job only.
_DELIVERED_ACTIONS = frozenset({JobAction.AGAIN, JobAction.REMIX, JobAction.DELETE})
#: Of those, the ones that only read the job's prompt: also while its result is being posted (the
#: file shows a moment before DELIVERED is stored, longer while the store is slow, and a click may
#: come in between). Delete waits for DELIVERED: a delivery still going on would post the file again.
_READ_WHILE_POSTING = frozenset({JobAction.AGAIN, JobAction.REMIX})
#: Actions that put the job's prompt where the actor is (a new job's message, a form): only for a
#: viewer to whom it shows (:meth:`QueueViewer.hides`), as /queue and /job show it.
_PROMPT_ACTIONS = frozenset({JobAction.AGAIN, JobAction.REMIX, JobAction.RETRY})


class Refusal(StrEnum):
    """Why an action on a job is not possible."""

    NOT_FOUND = "not_found"  # no such job in this server (or not in a state the action needs)
    NOT_ALLOWED = "not_allowed"  # neither the requester nor a server manager
    TOO_LATE_TO_CANCEL = "too_late_to_cancel"  # being delivered, or finished


class JobRefused(Exception):
    """An action on job `job_id` is not possible: `refusal` says why (the edge words it)."""

    def __init__(self, refusal: Refusal, job_id: int) -> None:
        super().__init__(f"{refusal.value}: job {job_id}")
        self.refusal = refusal
        self.job_id = job_id


@dataclass(frozen=True)
class Request:
    """A checked request, ready for :meth:`Members.submit`: who, what kind, the job's parameters."""

    who: Requester
    kind: JobKind
    params: Mapping[str, Any]
    #: The failed job this one retries (one retry per job, enforced by the store).
    retry_of: int | None = None
    #: The delivered job an Again or a Remix starts from (for the log).
    from_job: int | None = None
    #: The stored job whose style this request keeps (a Remix: its form has no room for the style,
    #: which is read, and applied to the new prompt, in :meth:`Members.submit`).
    style_from: int | None = None
    #: Who asked for a retry (`who` is the failed job's member): a server manager may retry a
    #: member's job, and the member's limits then refuse it in the member's name.
    retried_by: int | None = None


@dataclass(frozen=True)
class Started:
    """A request was accepted: the job is persisted, queued and shown."""

    job: Job
    #: Its place in the server's queue (1: next).
    position: int


@dataclass(frozen=True)
class CancelResult:
    """A job is cancelled (`already`: it was before this request: a double click, say)."""

    job: Job
    already: bool = False


@dataclass(frozen=True)
class RemixPrefill:
    """What the Remix form of a delivered job shows: its options, and what an empty field means."""

    job_id: int
    kind: JobKind
    options: JobOptions
    #: The model an empty model field gets (this server's default of the moment).
    default_model: str
    #: The longest prompt accepted.
    prompt_max: int


@dataclass(frozen=True)
class JobDetails:
    """/job: a job as the viewer may see it, its place in the queue, and what its estimate is
    measured against.

    When `hidden` says why, the job is another member's from a channel the viewer may not read
    (:func:`as_seen_by`, the rule of /queue and /history): it carries no prompt, no styled prompt,
    no chat record (no message to link to) and no result link.
    """

    job: Job
    position: int | None
    now: float
    poll_timeout: float
    #: Why the job's prompt, message and result are not shown to this viewer; None when they are.
    hidden: PromptHidden | None = None
    #: When and by whom its result was deleted (None: it was not), kept when the rest is hidden.
    deleted: Deletion | None = None
    #: The service's link to its result as it may be shown (:func:`shareable_link`); None: none.
    link: str | None = None


@dataclass(frozen=True)
class KindModels:
    """The service's models of one kind, and which one a job gets in this server with none picked."""

    kind: JobKind
    ids: tuple[str, ...]
    default: str


@dataclass(frozen=True)
class ModelList:
    """/models: the service's models by kind (``None`` from :meth:`Members.list_models` while unknown)."""

    kinds: tuple[KindModels, ...]


@dataclass(frozen=True)
class MemberLimits:
    """The limits a member has in a server (for /help)."""

    policy: Policy
    #: When the daily quotas start again (epoch seconds); None when the server has no quota.
    quotas_reset_at: float | None


class Members:
    """The members' use cases, over the intake, the store, the scheduler and the model list.

    `estimate` gives a job's estimate (the planner of the key it runs on); `shows` is the chat side
    that shows a job's state; `poll_timeout` is how long a job may run on the service.
    """

    def __init__(
        self,
        *,
        intake: Intake,
        store: Store,
        scheduler: Scheduler,
        models: ModelCache,
        shows: ShowsJobs,
        estimate: Callable[[Job], Estimate],
        clock: Clock,
        poll_timeout: float,
        reveals_key: Callable[[str], bool],
        styles: StyleBook | None = None,
    ) -> None:
        """`reveals_key`: whether a text carries one of the bot's API keys (``Accounts.reveals_key``):
        /job never shows a result link that does."""
        self._reveals_key = reveals_key
        self._intake = intake
        self._store = store
        self._scheduler = scheduler
        self._models = models
        self._shows = shows
        self._estimate = estimate
        self._clock = clock
        self._poll_timeout = poll_timeout
        self._styles = styles

    def __repr__(self) -> str:
        return f"<Members models={self._models!r}>"

    # -- requesting a video or an image: two phases around Discord's acknowledgement -----------------
    def check(self, who: Requester, kind: JobKind | None = None) -> None:
        """Where and whether (no I/O): the server's key, channel, NSFW rule, a zero quota, the limits.

        Raises :class:`IntakeError`. Used alone before acknowledging a click whose job kind is not
        known yet (Again, Remix).
        """
        self._intake.precheck(who, kind)

    def prepare(self, who: Requester, kind: JobKind, options: JobOptions) -> Request:
        """Where, whether and what, with no I/O (safe before the acknowledgement); a checked request.

        Where and whether first (:meth:`check`), then what: the prompt (length, blocklist), the
        options under the server's defaults and the presets, the model (:func:`choose_model`).
        Raises :class:`IntakeError` for anything the member can fix.
        """
        self._intake.precheck(who, kind)
        params = self._params(who.guild_id, kind, options)
        # The style comes after the prompt's own checks: the blocklist reads what the member typed.
        style = self._style(who.guild_id, kind, options)
        return Request(who=who, kind=kind, params=styled_params(params, style, self._prompt_chars))

    async def submit(self, request: Request, chat: Mapping[str, Any]) -> Started:
        """Persist and queue the request, then show it (after the acknowledgement).

        `chat` is the chat side's bookkeeping for the new job (where its message is, and how to
        edit it), stored with the job. Limits and the daily quota are checked again in the store's
        inserting transaction: :class:`IntakeError` when they are reached (or when a failed job was
        already retried).
        """
        params = dict(request.params)
        if request.style_from is not None:
            source = await self._store.get(request.style_from)
            if source is not None and source.guild_id == request.who.guild_id:
                params = styled_params(params, job_style(source.params), self._prompt_chars)
        job, position = await self._intake.accept(
            request.who, request.kind, params, discord=dict(chat), retry_of=request.retry_of
        )
        if request.from_job is not None:
            log.info("job %s: from job %s, by user %s", job.id, request.from_job, request.who.user_id)
        await self._shows.job_changed(job, urgent=True)
        return Started(job, position)

    def _params(self, guild_id: int, kind: JobKind, options: JobOptions) -> dict[str, Any]:
        kind_name = kind.value
        if kind is JobKind.VIDEO:
            return self._intake.video_params(
                guild_id=guild_id,
                prompt=options.prompt,
                model=options.model or None,
                size=options.size,
                seconds=options.seconds,
                frame_rate=options.fps,
                known_models=self._models.ids(kind_name),
                default_model=self._models.default(kind_name),
            )
        return self._intake.image_params(
            guild_id=guild_id,
            prompt=options.prompt,
            model=options.model or None,
            size=options.size,
            known_models=self._models.ids(kind_name),
            default_model=self._models.default(kind_name),
        )

    # -- acting on a job ------------------------------------------------------------------------------
    async def authorize(
        self, actor: Actor, job_id: int, action: JobAction, viewer: QueueViewer | None = None
    ) -> Job:
        """The stored job `job_id`, if `actor` may take `action` on it; else :class:`JobRefused`.

        NOT_FOUND: no such job in the actor's server, nor (Again, Remix, Retry) another person's own
        queue's job where it shows to `viewer` (for Again, Remix and Delete: no delivered one;
        for Again, Remix and Retry: none whose prompt shows to `viewer`, the actor where they act,
        and none without a viewer). NOT_ALLOWED: showing, cancelling, retrying or deleting by
        neither the requester nor a server manager.
        """
        job = await self._store.get(job_id)
        if job is None:
            raise JobRefused(Refusal.NOT_FOUND, job_id)
        # Another person's own queue (a user install's) has no server: its result shows where it
        # was asked (a group DM), and whoever sees it there may take its prompt, as in a server.
        seen_there = is_personal_queue(job.guild_id, job.user_id) and action in _PROMPT_ACTIONS
        if job.guild_id != actor.guild_id and not seen_there:
            raise JobRefused(Refusal.NOT_FOUND, job_id)
        if action in _PROMPT_ACTIONS and (viewer is None or viewer.hides(job) is not None):
            # A job of a channel the actor cannot read (a forged custom id names any) is not there.
            raise JobRefused(Refusal.NOT_FOUND, job_id)
        posting = action in _READ_WHILE_POSTING and job.state is JobState.DELIVERING
        if action in _DELIVERED_ACTIONS and job.state is not JobState.DELIVERED and not posting:
            raise JobRefused(Refusal.NOT_FOUND, job_id)
        if action in _OWNER_ACTIONS and not actor.may_manage(job):
            raise JobRefused(Refusal.NOT_ALLOWED, job_id)
        return job

    async def cancel(self, actor: Actor, job_id: int) -> CancelResult:
        """Cancel a queued or running job (the requester or a server manager), and show it.

        A job cancelled already is shown again (a double click, or a restart between the cancel
        and the redraw). Raises :class:`JobRefused`: TOO_LATE_TO_CANCEL once it is being delivered
        or has finished.
        """
        await self.authorize(actor, job_id, JobAction.CANCEL)
        outcome, job = await self._scheduler.cancel(job_id)
        if job is None or outcome is CancelOutcome.UNKNOWN:
            raise JobRefused(Refusal.NOT_FOUND, job_id)
        if outcome is CancelOutcome.CANCELLED:
            log.info("job %s cancelled by user %s", job_id, actor.user_id)
            await self._shows.job_changed(job, urgent=True)
            return CancelResult(job)
        if job.state is JobState.CANCELLED:
            await self._shows.job_changed(job, urgent=True)
            return CancelResult(job, already=True)
        raise JobRefused(Refusal.TOO_LATE_TO_CANCEL, job_id)

    def prepare_retry(self, where: Requester, job: Job) -> Request:
        """A retry of `job` (authorized, see :meth:`authorize`) as its requester's job, where `where` is.

        No I/O. The new job has the failed job's parameters; a default model is the default of
        now (the service's list may have dropped the old one). Raises :class:`IntakeError`.
        """
        who = dataclasses.replace(where, user_id=job.user_id)
        try:
            self._intake.precheck(who, job.kind)
            # Today's blocklist and prompt limit, as for Again: a term added since the failure holds.
            self._intake.check_prompt(job.guild_id, job.prompt)
        except IntakeError as error:
            raise _whose_limit(error, member=job.user_id, asking=where.user_id) from None
        params = {k: v for k, v in job.params.items() if k not in _MODEL_KEYS}
        params.update(self._model_again(job).params())
        return Request(who=who, kind=job.kind, params=params, retry_of=job.id, retried_by=where.user_id)

    async def retry(self, request: Request, chat: Mapping[str, Any]) -> Started:
        """Queue a prepared retry (:meth:`prepare_retry`) as a new job, and show it.

        Raises :class:`JobRefused` (NOT_FOUND) when the job is no longer a failed one, and
        :class:`IntakeError` (ALREADY_RETRIED) for a second retry of the same job: the store allows
        one, in its transaction, so a double click or two members at once get one retry.
        """
        assert request.retry_of is not None, "not a retry"
        old = await self._store.get(request.retry_of)
        if old is None or old.state is not JobState.FAILED:
            raise JobRefused(Refusal.NOT_FOUND, request.retry_of)
        try:
            started = await self.submit(request, chat)
        except IntakeError as error:
            asking = request.who.user_id if request.retried_by is None else request.retried_by
            raise _whose_limit(error, member=request.who.user_id, asking=asking) from None
        log.info("job %s: retry of job %s", started.job.id, old.id)
        return started

    async def again(
        self, who: Requester, viewer: QueueViewer, job_id: int, chat: Mapping[str, Any]
    ) -> Started:
        """A delivered job's prompt and options as a new job of `who`'s, shown as its own message.

        Any member to whom its prompt shows (`viewer`: :meth:`authorize`) may: the options are
        checked again under today's rules (blocklist, models, the server's default model when the
        job had a default), and `who`'s limits and quota apply.
        """
        job = await self.authorize(_actor(who), job_id, JobAction.AGAIN, viewer)
        request = self.prepare(who, job.kind, options_of(job))
        return await self.submit(dataclasses.replace(request, from_job=job.id), chat)

    async def remix_prefill(self, who: Requester, viewer: QueueViewer, job_id: int) -> RemixPrefill:
        """What the Remix form of delivered job `job_id` shows to `who` (any member to whom its
        prompt shows: `viewer`, :meth:`authorize`).

        `who`'s where and whether are checked first, so a member who could not queue the result
        never gets a form. Raises :class:`IntakeError` or :class:`JobRefused` (NOT_FOUND).
        """
        self._intake.precheck(who)
        job = await self.authorize(_actor(who), job_id, JobAction.REMIX, viewer)
        self._intake.precheck(who, job.kind)  # the kind's daily quota, now that it is known
        return RemixPrefill(
            job_id=job.id,
            kind=job.kind,
            options=options_of(job),
            default_model=self.default_model(who.guild_id, job.kind),
            prompt_max=self._intake.limits.prompt_chars,
        )

    def prepare_remix(self, who: Requester, kind: JobKind, job_id: int, form: FormInput) -> Request:
        """The submitted Remix form of job `job_id` as a checked request (no I/O), like /video or /image."""
        request = self.prepare(who, kind, options_from_form(kind, form))
        return dataclasses.replace(request, from_job=job_id, style_from=job_id)

    # -- looking around ------------------------------------------------------------------------------
    async def show_job(self, actor: Actor, viewer: QueueViewer, job_id: int) -> JobDetails:
        """/job: the job (the requester's or a server manager's), its place and the time of asking.

        `viewer` (the same person as `actor`) says which channels they can read: a server manager
        looking at another member's job from a channel they cannot read (or an age-restricted one
        from elsewhere) gets it as /queue and /history show it, without its prompt, message or file.
        """
        found = await self.authorize(actor, job_id, JobAction.SHOW)
        job, hidden = as_seen_by(viewer, found)
        return JobDetails(
            job=job,
            position=self._scheduler.position(job.id),
            now=self._clock.time(),
            poll_timeout=self._poll_timeout,
            hidden=hidden,
            deleted=found.deleted,
            link=shareable_link(job.result_url, self._reveals_key),
        )

    async def show_queue(self, guild_id: int, viewer: QueueViewer) -> QueueView:
        """/queue: the server's running and queued jobs in order, `viewer`'s own marked.

        Every job keeps its place and is counted; another member's prompt is shown only where
        `viewer` could read it (:meth:`QueueViewer.hides`).
        """
        rows = order_rows(
            await self._store.active(),
            guild_id,
            position=self._scheduler.position,
            estimate=self._estimate_or_none,
            viewer=viewer,
        )
        return QueueView(rows=tuple(rows), viewer=viewer.user_id, now=self._clock.time())

    def _estimate_or_none(self, job: Job) -> Estimate | None:
        try:
            return self._estimate(job)
        except Exception:
            # An estimate is a nicety: /queue answers without it.
            log.exception("job %s: no estimate", job.id)
            return None

    def list_models(self, guild_id: int) -> ModelList | None:
        """/models: the service's models by kind with this server's defaults; None while unknown."""
        if self._models.catalog is None:
            return None
        return ModelList(
            tuple(
                KindModels(kind, self._models.ids(kind.value), self.default_model(guild_id, kind))
                for kind in JobKind
            )
        )

    def suggest_styles(self, guild_id: int | None, kind: JobKind | str, typed: str) -> list[Style]:
        """Autocomplete for ``style:``: the server's styles for `kind` matching what was typed (no I/O)."""
        return self._styles.suggest(guild_id, JobKind(kind), typed) if self._styles is not None else []

    def _style(self, guild_id: int, kind: JobKind, options: JobOptions) -> Style | None:
        """The style a request asks for: kept by the job it is made again from, else the server's by name.

        :class:`IntakeError` UNKNOWN_STYLE for a name the server has no style by (autocomplete
        values are not checked by Discord), STYLE_WRONG_KIND for a style of the other kind.
        """
        if options.style_template is not None:
            return Style(options.style or "", options.style_template)
        if not options.style:
            return None
        style = self._styles.find(guild_id, options.style) if self._styles is not None else None
        if style is None:
            raise IntakeError(IntakeProblem.UNKNOWN_STYLE, style=options.style)
        if not style.kind.fits(kind):
            raise IntakeError(IntakeProblem.STYLE_WRONG_KIND, style=style.name, kind=kind)
        return style

    @property
    def _prompt_chars(self) -> int:
        return self._intake.limits.prompt_chars

    def suggest_models(self, kind: JobKind | str, typed: str, limit: int = 25) -> list[str]:
        """Autocomplete: the default first, then the service's models matching what was typed."""
        return self._models.suggest(JobKind(kind).value, typed, limit)

    def default_model(self, guild_id: int, kind: JobKind) -> str:
        """The model a job of `kind` gets in this server when the member picks none (no I/O)."""
        return self._choose(guild_id, kind, None).model

    def limits(self, guild_id: int) -> MemberLimits:
        """/help: the limits a member has in this server, and when the daily quotas start again."""
        policy = self._intake.policy(guild_id)
        quotas = any(policy.daily_quota(kind) is not None for kind in JobKind)
        return MemberLimits(policy, self._intake.quota_window()[1] if quotas else None)

    # -- which model: through model_choice, for every path --------------------------------------------
    def _choose(self, guild_id: int, kind: JobKind, picked: str | None) -> ModelChoice:
        server = self._intake.policy(guild_id).settings
        return choose_model(
            picked,
            server_default=server.video_model if kind is JobKind.VIDEO else server.image_model,
            operator_default=self._models.default(kind.value),
            listed=self._models.ids(kind.value),
        )

    def _model_again(self, job: Job) -> ModelChoice:
        """The model a job made again gets: the same pick, or the default of now."""
        picked = job.params.get("model") if ModelChoice.of_params(job.params) is ModelSource.PICKED else None
        return self._choose(job.guild_id, job.kind, picked)


#: The refusals of a member's own limits: their jobs queued or running, their daily quota.
_MEMBERS_LIMITS = frozenset({IntakeProblem.MEMBER_LIMIT, IntakeProblem.DAILY_QUOTA})


def _whose_limit(error: IntakeError, *, member: int, asking: int) -> IntakeError:
    """`error`, naming the `member` whose limit refused it when someone else was `asking` for them
    (a server manager's Retry of a member's job): the refusal is the member's, not the asker's."""
    if error.problem not in _MEMBERS_LIMITS or member == asking:
        return error
    return IntakeError(error.problem, **{**error.params, "member": member})


def _actor(who: Requester) -> Actor:
    # Again and Remix need no authority beyond being a member of the job's server.
    return Actor(user_id=who.user_id, guild_id=who.guild_id)
