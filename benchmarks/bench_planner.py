"""Planner benchmark: how well the bot spends one API key's 16 requests a minute.

The real core (``framecast.app.core.Core``: store, budget, client, runner, scheduler and whatever plans
the key's requests) runs against the fake generation service under a :class:`ScaledClock`, at the
production ratio: ``GEN_RATE_LIMIT=16/60``, ``GEN_POLL_INTERVAL=30``, video durations drawn
uniformly from 60 to 180 clock seconds (seeded), a batch of videos across several guilds, all
accepted at once through ``core.intake.accept``. It runs twice, with the service reporting progress
(an integer percentage) and without it, and once more as a naive bot: the same client and budget,
every job created at once as the budget allows, each task polled every 30 s, the result downloaded
when completed, no concurrency cap. The three columns are printed side by side:

* makespan and its ratio to the physical bound: every video needs a create, one poll that sees it
  completed and a download from the service's origin (3 requests), so the batch needs at least
  ``3 x jobs`` requests at the budget's rate, or the longest video, whichever is larger;
* requests per delivered video, counted by the fake (every request carrying the key, 429s too);
* the delay from the service's completion (the task's drawn duration elapsed) to the file reaching
  the chat side, median and p90, as a fraction of the poll interval;
* the largest error of the ETA the chat side would show, from the ``Estimates`` provider the core
  hands the chat side (``n/a`` when the core hands none), sampled at every change of a job and
  every ``EDIT_INTERVAL``; likewise the estimated start of queued jobs; and how often the
  percentage a message is drawn from fell below one it showed before (the chat side then holds
  its highest figure, so the screen never goes back; a count above zero is an estimate that ran
  ahead of the truth);
* in every shape, the median relative error of every "starts in" and "left" a member saw, against
  when the job actually started and stopped generating (``estimate_error.py``).

All times are printed in clock seconds (real seconds x scale). The rate window (60 s / scale real
seconds) must stay far above the local round trip (a few milliseconds): scale 20 gives 3 s.

Run: ``python3 benchmarks/bench_planner.py [--jobs 48] [--guilds 4] [--scale 20] [--seed 9]``

``--shape mixed``: 36 such videos accepted at once, then 12 images (3 per guild)
8 clock seconds later; it prints each image's time from its command to its file (p50, p90, max) and
the videos' makespan, beside the naive bot (which creates each image as the budget allows).

``--shape random``: members arriving at random moments, the family the planner
was not tuned on (``arrivals.py``: Poisson arrivals for 20 minutes at ``--loads`` shares of what the
key carries, log-normal durations, one job in five an image, 1 to 8 servers, ``--seeds``). One
Markdown row per run: the members' wait (command -> file) mean and p90 beside the clairvoyant bound
(``arrivals.clairvoyant_mean_wait``; every shape prints it), the images' p90, completion -> file,
the estimates' median errors (their bias), requests per job, 429s and the busiest window.

``--code REV`` runs the framecast of a git commit instead of the working tree (``git archive`` into
a temporary directory first on ``sys.path``), to measure the code before a change beside it;
``--beside REV`` runs both at once, in two processes, and prints both tables.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import older_trees  # noqa: E402  (beside this file: today's names for an older tree's values)


def _code_from_git() -> str | None:
    """``--code REV``: run the framecast of that commit (``git archive REV framecast`` into a
    temporary directory put first on ``sys.path``, as ``bench_store.py`` does for its old store), to
    measure today's code beside the code before a change. The fakes stay this tree's."""
    if "--code" not in sys.argv:
        return None
    rev = sys.argv[sys.argv.index("--code") + 1]
    root = Path(__file__).resolve().parent.parent
    into = Path(tempfile.mkdtemp(prefix="framecast-code-"))
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", rev, "framecast"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    sys.path.insert(0, str(into))
    # That tree may predate framecast/values/: this tree's names of its values become aliases.
    older_trees.alias_moved_values()
    return rev


CODE = _code_from_git()

import arrivals  # noqa: E402  (beside this file: the random-arrival family)
import estimate_error  # noqa: E402  (beside this file: how honest the shown estimates are)

from framecast.app.core import Core  # noqa: E402
from framecast.app.intake import Requester  # noqa: E402
from framecast.clock import Clock, ScaledClock  # noqa: E402
from framecast.config import Settings, load_settings  # noqa: E402
from framecast.jobs.chat_side import Delivered, DeliveryOutcome, ResultToDeliver  # noqa: E402
from framecast.jobs.queues import QueuePositions  # noqa: E402
from framecast.keys.budget import RequestBudget  # noqa: E402
from framecast.ops.metrics import Metrics  # noqa: E402
from framecast.planner.estimate import Estimate, Estimates  # noqa: E402
from framecast.service import GenerationClient, ImageParams, VideoParams  # noqa: E402
from framecast.service.errors import ServiceError  # noqa: E402
from framecast.service.refusals import CreateRefusals  # noqa: E402
from framecast.storage import Store  # noqa: E402
from framecast.values import (  # noqa: E402
    Job,
    JobKind,
    JobState,
    presets,  # noqa: E402
)
from framecast.values.reasons import Note  # noqa: E402
from framecast.values.service_requests import RefusalKind  # noqa: E402
from tests.fakes.gen_service import FakeService, TaskPlan  # noqa: E402

RATE_REQUESTS = 16
RATE_WINDOW = 60.0  # clock seconds
POLL_INTERVAL = 30.0  # clock seconds
DURATION_RANGE = (60.0, 180.0)  # clock seconds a video takes on the service
REQUESTS_PER_VIDEO = 3  # create, the poll that sees it completed, the download
#: How often the chat side would refresh a message between changes (``EDIT_INTERVAL``'s default).
SAMPLE_EVERY = 5.0  # clock seconds
#: Give up on a run after this many times the physical bound (a stuck run still prints its figures).
GIVE_UP_AFTER = 8.0

Run = Literal["progress", "no-progress", "naive"]
RUNS: dict[str, Run] = {"progress": "progress", "no-progress": "no-progress", "naive": "naive"}

_ACTIVE_SHOWN = (JobState.SUBMITTING, JobState.RUNNING)
_TERMINAL = (JobState.DELIVERED, JobState.FAILED, JobState.CANCELLED)


@dataclass(frozen=True)
class Clip:
    """One video of the batch: who asks for it and how long the service takes (clock seconds)."""

    tag: str  # unique marker inside the prompt: how the fake's task and the job are matched
    guild: int
    member: int
    duration: float

    @property
    def prompt(self) -> str:
        """The prompt sent for this clip."""
        return f"a benchmark clip {self.tag}"


def make_batch(jobs: int, guilds: int, seed: int) -> list[Clip]:
    """`jobs` clips spread evenly over `guilds` (two per member), durations drawn with `seed`."""
    rng = random.Random(seed)
    return [
        Clip(
            f"[j{n:03d}]", guild=n % guilds, member=(n // guilds) // 2, duration=rng.uniform(*DURATION_RANGE)
        )
        for n in range(jobs)
    ]


def physical_bound(batch: Sequence[Clip]) -> float:
    """The shortest possible makespan: 3 requests per video at the budget's rate, or the longest video."""
    requests = REQUESTS_PER_VIDEO * len(batch)
    return max(requests / RATE_REQUESTS * RATE_WINDOW, max(c.duration for c in batch))


def _clairvoyant(videos: Sequence[Clip], images: Sequence[Clip] = (), images_at: float = 0.0) -> float:
    """The members' mean wait no planner can beat (:func:`arrivals.clairvoyant_mean_wait`)."""
    jobs = [arrivals.Arrival(c.tag, c.guild, c.member, 0.0, False, c.duration) for c in videos]
    jobs += [arrivals.Arrival(c.tag, c.guild, c.member, images_at, True, 0.0) for c in images]
    return arrivals.clairvoyant_mean_wait(jobs, requests=RATE_REQUESTS, window=RATE_WINDOW)


def tag_of(prompt: str) -> str:
    """The clip tag inside a prompt (``[jNNN]``)."""
    start = prompt.index("[j")
    return prompt[start : prompt.index("]", start) + 1]


# -- the recording chat side ------------------------------------------------------------------------


@dataclass
class Shown:
    """One look at a job as its message would show it (real monotonic time)."""

    at: float
    state: JobState
    estimate: Estimate | None


@dataclass
class Track:
    """What the chat side saw of one job."""

    job: Job
    shown: list[Shown] = field(default_factory=list)
    started: float | None = None  # real time it left the queue
    delivered: float | None = None  # real time the file reached the chat side
    last_percent: int | None = None
    backwards: int = 0  # times the percentage fell below the highest one shown before


class RecordingChat:
    """A chat side that shows nothing: it records when each job changed, what it would show, and
    when its file arrived. Uploads are instant and never too large (no re-encode).
    """

    def __init__(self, *, clock: Clock, estimates: Estimates | None) -> None:
        self._clock = clock
        self.estimates = estimates
        self.tracks: dict[int, Track] = {}
        self.all_done = asyncio.Event()
        self._expected = 0
        self._sampler: asyncio.Task[None] | None = None

    def expect(self, jobs: int) -> None:
        """How many jobs the run submits (``all_done`` is set once that many are finished)."""
        self._expected = jobs

    def start_sampling(self) -> None:
        """Look at every unfinished job every ``SAMPLE_EVERY`` clock seconds, as message refreshes would."""
        self._sampler = asyncio.create_task(self._sample_loop())

    async def _sample_loop(self) -> None:
        while True:
            await self._clock.sleep(SAMPLE_EVERY)
            for track in list(self.tracks.values()):
                if track.job.state not in _TERMINAL:
                    self._look(track)

    def _look(self, track: Track) -> None:
        job = track.job
        # Estimates are for jobs still waiting on the service; past that the message shows facts.
        waiting = job.state in (JobState.QUEUED, *_ACTIVE_SHOWN)
        estimate = self.estimates.estimate(job) if self.estimates is not None and waiting else None
        track.shown.append(Shown(time.monotonic(), job.state, estimate))
        # The percentage the message is drawn from: the estimate when there is one, else the
        # service's last report. The chat side never shows it going down (it holds the highest
        # figure shown), so this counts how often that floor had to hold: an estimate that ran
        # ahead of the truth.
        progress = (
            estimate.progress if estimate is not None and estimate.progress is not None else job.progress
        )
        if progress is None:
            return
        percent = int(progress * 100 + 1e-9)
        if track.last_percent is not None and percent < track.last_percent:
            track.backwards += 1
        track.last_percent = max(percent, track.last_percent or 0)

    def finished(self) -> list[Track]:
        """Tracks of the jobs that reached a terminal state."""
        return [t for t in self.tracks.values() if t.job.state in _TERMINAL]

    # -- ChatSide -----------------------------------------------------------------------------------
    async def job_changed(self, job: Job, *, urgent: bool = False) -> None:
        """Record the change and look at the job as its message would show it."""
        track = self.tracks.get(job.id)
        if track is None:
            track = self.tracks[job.id] = Track(job)
        track.job = job
        if track.started is None and job.state is not JobState.QUEUED:
            track.started = time.monotonic()
        self._look(track)
        if self._expected and len(self.finished()) >= self._expected:
            self.all_done.set()

    async def upload_limit(self, job: Job, refused: int | None = None) -> int:
        """Far above any result: the benchmark measures requests, not re-encodes."""
        return 1 << 40

    async def delivery_pending(self, job: Job) -> None:
        """Nothing to show: the benchmark draws no messages."""

    async def deliver(self, job: Job, result: ResultToDeliver) -> DeliveryOutcome:
        """The file (or, never expected, the link) reached the chat: note when."""
        self.tracks[job.id].delivered = time.monotonic()
        return Delivered()

    async def was_delivered(self, job: Job) -> bool:
        """Whether the file already arrived."""
        track = self.tracks.get(job.id)
        return track is not None and track.delivered is not None

    def positions_changed(self, guild_id: int, queued: list[int]) -> None:
        """Positions are not measured."""

    async def key_refused(self, notice: object) -> None:
        """No server key is refused here (and an older core, ``--code``, never asks)."""

    def add_note(self, job: Job, note: Note) -> None:
        """Notes are not measured."""

    async def remove_job_message(self, job: Job) -> None:
        """No messages: nothing to remove."""

    async def close(self) -> None:
        """Stop sampling."""
        if self._sampler is not None:
            self._sampler.cancel()
            try:
                await self._sampler
            except asyncio.CancelledError:
                pass


class RecordingChatFactory:
    """Builds the :class:`RecordingChat` for ``Core.open`` and keeps it for the benchmark."""

    def __init__(self) -> None:
        self.chat: RecordingChat | None = None

    def __call__(
        self,
        *,
        store: Store,
        positions: QueuePositions,
        clock: Clock,
        estimates: Estimates | None = None,
        metrics: Metrics | None = None,
    ) -> RecordingChat:
        """The chat side; `estimates` is the key's planner once the core passes one."""
        self.chat = RecordingChat(clock=clock, estimates=estimates)
        return self.chat


# -- one run's figures ------------------------------------------------------------------------------


@dataclass
class RunResult:
    """The figures of one run, in clock seconds."""

    label: str
    jobs: int
    delivered: int
    makespan: float
    requests: int
    rejected: int  # 429 answers
    busiest_window: int  # most requests the fake received in one rate window
    polls: int
    delays: list[float]  # service completion -> file in the chat side, per delivered video
    fastest_repoll: float | None  # the shortest gap between two polls of one task
    eta_errors: list[float] | None  # |shown ETA - actual delivery| over all looks at started jobs
    start_errors: list[float] | None  # |shown start - actual start| over all looks at queued jobs
    backwards: int | None  # percentages below one shown before (held by the chat side's floor)
    creates: int = 0  # create requests the fake received (refused ones too)
    refused_creates: int = 0  # creates answered 429 (the capped shape: concurrency refusals)
    estimates: estimate_error.EstimateErrors | None = None  # each shown estimate vs what happened
    waits: list[float] = field(default_factory=list)  # submission -> file, per video


def settings_for(fake: FakeService, data_dir: Path, batch: Sequence[Clip]) -> Settings:
    """Production timings; limits wide enough that the whole batch is accepted at once."""
    per_member = max(Counter((c.guild, c.member) for c in batch).values())
    per_guild = max(Counter(c.guild for c in batch).values())
    return load_settings(
        {
            "DISCORD_TOKEN": "benchmark",
            "GEN_API_BASE_URL": fake.base_url,
            "GEN_API_KEY": fake.api_key,
            "GEN_RATE_LIMIT": f"{RATE_REQUESTS}/{RATE_WINDOW:g}",
            "GEN_POLL_INTERVAL": f"{POLL_INTERVAL:g}",
            "DATABASE_PATH": str(data_dir / "framecast.sqlite3"),
            "MEMBER_JOB_LIMIT": str(per_member),
            "GUILD_QUEUE_CAP": str(per_guild),
            "EDIT_INTERVAL": f"{SAMPLE_EVERY:g}",
        }
    )


async def fake_for(
    batch: Sequence[Clip], scale: float, progress: bool, *, cap: int | None = None
) -> FakeService:
    """A started fake service: the key's real limit (in real seconds) and one plan per clip."""
    fake = FakeService()
    await fake.start()
    fake.rate_limit = (RATE_REQUESTS, RATE_WINDOW / scale)
    fake.progress_shape = "int" if progress else "missing"
    # polls=0: a task completes when its duration has elapsed, however often it was polled.
    fake.plans = [(c.tag, TaskPlan(duration=c.duration / scale, polls=0)) for c in batch]
    fake.max_running = cap  # the capped shape: creates refused while the key runs `cap` tasks
    if CAPPED_SAYS is not None:  # --cap-says: the refusal's words (a rate refusal's, say)
        fake.max_running_message, fake.max_running_type = CAPPED_SAYS, "rate_limit_error"
    return fake


async def run_core(
    batch: Sequence[Clip], scale: float, *, progress: bool, cap: int | None = None
) -> RunResult:
    """The real core against the fake; all jobs accepted at once."""
    clock = ScaledClock(scale)
    fake = await fake_for(batch, scale, progress, cap=cap)
    factory = RecordingChatFactory()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            settings = settings_for(fake, Path(tmp), batch)
            core = await Core.open(settings, reporter=factory, clock=clock)
            chat = factory.chat
            assert chat is not None
            try:
                chat.expect(len(batch))
                chat.start_sampling()
                params = {
                    c.tag: core.intake.video_params(
                        guild_id=1000 + c.guild,
                        prompt=c.prompt,
                        model=None,
                        size=None,
                        seconds=None,
                        frame_rate=None,
                        known_models=(),
                        default_model=settings.gen_video_model,
                    )
                    for c in batch
                }
                started = time.monotonic()

                async def submit(c: Clip) -> None:
                    who = Requester(
                        guild_id=1000 + c.guild,
                        channel_id=2000 + c.guild,
                        user_id=3000 + c.member,
                        locale="en-US",
                    )
                    job, _ = await core.intake.accept(who, JobKind.VIDEO, params[c.tag])
                    await chat.job_changed(job, urgent=True)  # "Queued: #n", as the bot shows it

                await asyncio.gather(*(submit(c) for c in batch))
                await _wait_done(chat.all_done.wait(), batch, scale, cap=cap)
            finally:
                await core.close()
    finally:
        await fake.stop()
    tracks = {tag_of(t.job.params["prompt"]): t for t in chat.tracks.values()}
    delivered = {tag: t.delivered for tag, t in tracks.items() if t.delivered is not None}
    label = f"framecast{f' ({CODE})' if CODE else ''}, {'with' if progress else 'no'} progress"
    result = _figures(label, batch, fake, started, delivered, scale)
    if chat.estimates is not None:
        result.eta_errors, result.start_errors = _estimate_errors(tracks.values(), scale)
        result.backwards = sum(t.backwards for t in tracks.values())
        result.estimates = _shown_errors(tracks.values(), scale)
    return result


def _shown_errors(tracks: Iterable[Track], scale: float) -> estimate_error.EstimateErrors:
    """Each "starts in" and "left" shown, against when the job started and stopped generating."""
    return estimate_error.estimate_errors((t.shown for t in tracks), scale=scale, floor=POLL_INTERVAL)


async def run_naive(batch: Sequence[Clip], scale: float, *, cap: int | None = None) -> RunResult:
    """A naive bot on the same client and budget: create all, poll each every 30 s, no cap."""
    clock = ScaledClock(scale)
    fake = await fake_for(batch, scale, progress=True, cap=cap)
    delivered: dict[str, float] = {}
    size = presets.VIDEO_SIZES[presets.DEFAULT_VIDEO_SIZE]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            s = settings_for(fake, Path(tmp), batch)
            budget = RequestBudget(
                s.gen_rate_limit.requests,
                s.gen_rate_limit.window,
                clock=clock,
                backoff_base=s.gen_backoff_base,
                backoff_max=s.gen_backoff_max,
            )
            async with aiohttp.ClientSession() as session:
                client = GenerationClient.from_settings(session, s, budget, clock)
                # A naive bot tells no refusal from another: every 429 pauses and is retried.
                client._transport.refusals = _NaiveRefusals()

                async def one(c: Clip) -> None:
                    params = VideoParams(
                        model=s.gen_video_model,
                        prompt=c.prompt,
                        width=size.width,
                        height=size.height,
                        num_frames=presets.num_frames(
                            presets.DEFAULT_VIDEO_SECONDS, presets.DEFAULT_FRAME_RATE
                        ),
                        frame_rate=presets.DEFAULT_FRAME_RATE,
                    )
                    try:
                        task_id = await client.create_video(params)
                    except ServiceError:
                        return  # the job fails: not delivered
                    status = await client.wait_video(
                        task_id, interval=s.gen_poll_interval, timeout=s.gen_poll_timeout
                    )
                    assert status.result_url is not None
                    await client.download(
                        status.result_url, max_bytes=s.gen_download_max_bytes, timeout=s.gen_download_timeout
                    )
                    delivered[c.tag] = time.monotonic()

                started = time.monotonic()
                try:
                    await _wait_done(asyncio.gather(*(one(c) for c in batch)), batch, scale, cap=cap)
                finally:
                    await client.close()
                    budget.close()
    finally:
        await fake.stop()
    return _figures("naive: every 30 s, no cap", batch, fake, started, delivered, scale)


class _NaiveRefusals(CreateRefusals):
    """Every create's 429 taken for a rate refusal (what a bot that reads no answer does)."""

    def classify(self, body: bytes | str) -> RefusalKind:
        """Always a rate refusal."""
        return RefusalKind.RATE


async def _wait_done(
    done: Awaitable[object], batch: Sequence[Clip], scale: float, *, cap: int | None = None
) -> None:
    """Wait for the run to end, giving up after ``GIVE_UP_AFTER`` times the bound (the cap's, if any)."""
    bound = physical_bound(batch) if cap is None else cap_bound(batch, cap)
    limit = bound * GIVE_UP_AFTER / scale
    try:
        await asyncio.wait_for(done, limit)
    except TimeoutError:
        print(f"(a run gave up after {limit:.0f} real seconds; its figures cover what finished)")


def _figures(
    label: str,
    batch: Sequence[Clip],
    fake: FakeService,
    started: float,
    delivered: dict[str, float],
    scale: float,
) -> RunResult:
    authorised = [r for r in fake.requests if r.auth_ok]
    polls = [r for r in authorised if r.path == "/svcapi"]
    # A task is done on the service once its drawn duration has elapsed since its create was answered.
    completed = {tag_of(t.prompt): t.created + t.plan.duration for t in fake.tasks.values()}
    delays = [(at - completed[tag]) * scale for tag, at in delivered.items() if tag in completed]
    by_task: dict[str, list[float]] = {}
    for r in polls:
        by_task.setdefault(r.query.get("video_id", ""), []).append(r.received)
    gaps = [(b - a) * scale for times in by_task.values() for a, b in zip(times, times[1:], strict=False)]
    return RunResult(
        label=label,
        jobs=len(batch),
        delivered=len(delivered),
        makespan=(max(delivered.values(), default=started) - started) * scale,
        requests=len(authorised),
        rejected=sum(1 for r in authorised if r.status == 429),
        busiest_window=fake.max_in_window(),
        polls=len(polls),
        delays=delays,
        fastest_repoll=min(gaps, default=None),
        eta_errors=None,
        start_errors=None,
        backwards=None,
        creates=sum(1 for r in authorised if r.method == "POST" and r.path == "/v1/videos"),
        refused_creates=sum(
            1 for r in authorised if r.method == "POST" and r.path == "/v1/videos" and r.status == 429
        ),
        waits=[(at - started) * scale for at in delivered.values()],
    )


def _estimate_errors(tracks: Iterable[Track], scale: float) -> tuple[list[float], list[float]]:
    """Errors of every shown ETA (started jobs) and estimated start (queued jobs), in clock seconds."""
    eta: list[float] = []
    start: list[float] = []
    for track in tracks:
        for look in track.shown:
            e = look.estimate
            if e is None:
                continue
            if look.state in _ACTIVE_SHOWN and e.remaining is not None and track.delivered is not None:
                eta.append(abs(look.at + e.remaining / scale - track.delivered) * scale)
            if look.state is JobState.QUEUED and e.starts_in is not None and track.started is not None:
                start.append(abs(look.at + e.starts_in / scale - track.started) * scale)
    return eta, start


# -- the table --------------------------------------------------------------------------------------


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _errors_cell(values: list[float] | None) -> str:
    if values is None:
        return "n/a"
    if not values:
        return "none shown"
    return f"{max(values):.0f} s (p90 {_quantile(values, 0.9):.0f} s)"


Row = tuple[str, Callable[[RunResult], str]]


def rows(bound: float) -> list[Row]:
    """The table's rows: a label and how to print one run's figure."""

    def per_video(n: int, r: RunResult) -> str:
        return f"{n / r.delivered:.2f}" if r.delivered else "-"

    def waited(figure: Callable[[list[float]], float], r: RunResult) -> str:
        return f"{figure(r.waits):.0f} s" if r.waits else "-"

    def delay(q: float) -> Callable[[RunResult], str]:
        def cell(r: RunResult) -> str:
            if not r.delays:
                return "-"
            value = statistics.median(r.delays) if q == 0.5 else _quantile(r.delays, q)
            return f"{value / POLL_INTERVAL:.2f} ({value:.0f} s)"

        return cell

    return [
        ("delivered", lambda r: f"{r.delivered}/{r.jobs}"),
        ("makespan", lambda r: f"{r.makespan:.0f} s"),
        ("makespan / bound", lambda r: f"{r.makespan / bound:.2f}x"),
        ("requests per video", lambda r: per_video(r.requests, r)),
        ("polls per video", lambda r: per_video(r.polls, r)),
        ("429 answers", lambda r: str(r.rejected)),
        ("busiest rate window", lambda r: f"{r.busiest_window}/{RATE_REQUESTS}"),
        ("command -> file, mean (what members wait)", lambda r: waited(statistics.fmean, r)),
        ("command -> file, median", lambda r: waited(statistics.median, r)),
        ("command -> file, p90", lambda r: waited(lambda w: _quantile(w, 0.9), r)),
        ("completion -> file, median (x poll interval)", delay(0.5)),
        ("completion -> file, p90 (x poll interval)", delay(0.9)),
        (
            "fastest re-poll of a task (x poll interval)",
            lambda r: "-" if r.fastest_repoll is None else f"{r.fastest_repoll / POLL_INTERVAL:.2f}",
        ),
        ("largest ETA error (running jobs)", lambda r: _errors_cell(r.eta_errors)),
        ("largest start-estimate error (queued)", lambda r: _errors_cell(r.start_errors)),
        (
            "% below one shown before (screen holds)",
            lambda r: "n/a" if r.backwards is None else str(r.backwards),
        ),
        *estimate_error.rows(),
    ]


def print_table(results: Sequence[RunResult], bound: float) -> None:
    """The runs side by side, as a Markdown table."""
    table = [["", *(r.label for r in results)]]
    table += [[label, *(cell(r) for r in results)] for label, cell in rows(bound)]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    for n, line in enumerate(table):
        print("| " + " | ".join(text.ljust(w) for text, w in zip(line, widths, strict=True)) + " |")
        if n == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


# -- the mixed shape: images arriving behind a key saturated by videos ------------

#: The mixed shape: this many videos at once, then `MIXED_IMAGES` images `MIXED_IMAGES_AFTER` later.
MIXED_VIDEOS = 36
MIXED_IMAGES = 12
MIXED_IMAGES_AFTER = 8.0  # clock seconds


@dataclass
class MixedResult:
    """One run of the mixed shape, in clock seconds."""

    label: str
    videos: int
    images: int
    videos_delivered: int
    images_delivered: int
    video_makespan: float  # from the videos' commands to the last video's file
    image_waits: list[float]  # command -> file, per delivered image
    requests: int
    rejected: int
    busiest_window: int
    estimates: estimate_error.EstimateErrors | None = None  # each shown estimate vs what happened
    waits: list[float] = field(default_factory=list)  # command -> file, every delivered job


def make_mixed(guilds: int, seed: int) -> tuple[list[Clip], list[Clip]]:
    """The videos (as :func:`make_batch`) and the images (spread over the same guilds)."""
    videos = make_batch(MIXED_VIDEOS, guilds, seed)
    images = [
        Clip(f"[j{MIXED_VIDEOS + n:03d}]", guild=n % guilds, member=100 + n // guilds, duration=0.0)
        for n in range(MIXED_IMAGES)
    ]
    return videos, images


def _mixed_figures(
    label: str,
    videos: Sequence[Clip],
    images: Sequence[Clip],
    fake: FakeService,
    started: float,
    commanded: dict[str, float],
    delivered: dict[str, float],
    scale: float,
) -> MixedResult:
    video_tags = {c.tag for c in videos}
    video_done = [at for tag, at in delivered.items() if tag in video_tags]
    authorised = [r for r in fake.requests if r.auth_ok]
    return MixedResult(
        label=label,
        videos=len(videos),
        images=len(images),
        videos_delivered=len(video_done),
        images_delivered=sum(1 for c in images if c.tag in delivered),
        video_makespan=(max(video_done, default=started) - started) * scale,
        image_waits=[(delivered[c.tag] - commanded[c.tag]) * scale for c in images if c.tag in delivered],
        requests=len(authorised),
        rejected=sum(1 for r in authorised if r.status == 429),
        busiest_window=fake.max_in_window(),
        waits=[(at - commanded[tag]) * scale for tag, at in delivered.items() if tag in commanded],
    )


async def run_core_mixed(
    videos: Sequence[Clip], images: Sequence[Clip], scale: float, *, progress: bool
) -> MixedResult:
    """The real core: the videos accepted at once, the images `MIXED_IMAGES_AFTER` clock seconds later."""
    clock = ScaledClock(scale)
    everything = [*videos, *images]
    fake = await fake_for(videos, scale, progress)
    factory = RecordingChatFactory()
    commanded: dict[str, float] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            settings = settings_for(fake, Path(tmp), everything)
            core = await Core.open(settings, reporter=factory, clock=clock)
            chat = factory.chat
            assert chat is not None
            try:
                chat.expect(len(everything))
                chat.start_sampling()

                async def submit(c: Clip, kind: JobKind) -> None:
                    who = Requester(
                        guild_id=1000 + c.guild,
                        channel_id=2000 + c.guild,
                        user_id=3000 + c.member,
                        locale="en-US",
                    )
                    if kind is JobKind.VIDEO:
                        params = core.intake.video_params(
                            guild_id=who.guild_id, prompt=c.prompt, model=None, size=None, seconds=None,
                            frame_rate=None, known_models=(), default_model=settings.gen_video_model,
                        )  # fmt: skip
                    else:
                        params = core.intake.image_params(
                            guild_id=who.guild_id, prompt=c.prompt, model=None, size=None,
                            known_models=(), default_model=settings.gen_image_model,
                        )  # fmt: skip
                    commanded[c.tag] = time.monotonic()
                    job, _ = await core.intake.accept(who, kind, params)
                    await chat.job_changed(job, urgent=True)

                started = time.monotonic()
                await asyncio.gather(*(submit(c, JobKind.VIDEO) for c in videos))
                await clock.sleep(MIXED_IMAGES_AFTER - (time.monotonic() - started) * scale)
                await asyncio.gather(*(submit(c, JobKind.IMAGE) for c in images))
                await _wait_done(chat.all_done.wait(), videos, scale)
            finally:
                await core.close()
    finally:
        await fake.stop()
    delivered = {
        tag_of(t.job.params["prompt"]): t.delivered for t in chat.tracks.values() if t.delivered is not None
    }
    label = f"framecast{f' ({CODE})' if CODE else ''}, {'with' if progress else 'no'} progress"
    result = _mixed_figures(label, videos, images, fake, started, commanded, delivered, scale)
    result.estimates = _shown_errors(chat.tracks.values(), scale)
    return result


async def run_naive_mixed(videos: Sequence[Clip], images: Sequence[Clip], scale: float) -> MixedResult:
    """The naive bot (see :func:`run_naive`); each image: its create as the budget allows, then its download."""
    clock = ScaledClock(scale)
    fake = await fake_for(videos, scale, progress=True)
    delivered: dict[str, float] = {}
    commanded: dict[str, float] = {}
    size = presets.VIDEO_SIZES[presets.DEFAULT_VIDEO_SIZE]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            s = settings_for(fake, Path(tmp), [*videos, *images])
            budget = RequestBudget(
                s.gen_rate_limit.requests,
                s.gen_rate_limit.window,
                clock=clock,
                backoff_base=s.gen_backoff_base,
                backoff_max=s.gen_backoff_max,
            )
            async with aiohttp.ClientSession() as session:
                client = GenerationClient.from_settings(session, s, budget, clock)

                async def video(c: Clip) -> None:
                    commanded[c.tag] = time.monotonic()
                    params = VideoParams(
                        model=s.gen_video_model, prompt=c.prompt, width=size.width, height=size.height,
                        num_frames=presets.num_frames(presets.DEFAULT_VIDEO_SECONDS, presets.DEFAULT_FRAME_RATE),
                        frame_rate=presets.DEFAULT_FRAME_RATE,
                    )  # fmt: skip
                    task_id = await client.create_video(params)
                    status = await client.wait_video(
                        task_id, interval=s.gen_poll_interval, timeout=s.gen_poll_timeout
                    )
                    assert status.result_url is not None
                    await client.download(
                        status.result_url, max_bytes=s.gen_download_max_bytes, timeout=s.gen_download_timeout
                    )
                    delivered[c.tag] = time.monotonic()

                async def image(c: Clip) -> None:
                    await clock.sleep(MIXED_IMAGES_AFTER - (time.monotonic() - started) * scale)
                    commanded[c.tag] = time.monotonic()
                    square = presets.IMAGE_SIZES[presets.DEFAULT_IMAGE_SIZE]
                    result = await client.create_image(
                        ImageParams(model=s.gen_image_model, prompt=c.prompt, size=square.size)
                    )
                    assert result.url is not None
                    await client.download(
                        result.url, max_bytes=s.gen_download_max_bytes, timeout=s.gen_download_timeout
                    )
                    delivered[c.tag] = time.monotonic()

                started = time.monotonic()
                jobs = [*(video(c) for c in videos), *(image(c) for c in images)]
                try:
                    await _wait_done(asyncio.gather(*jobs), videos, scale)
                finally:
                    await client.close()
                    budget.close()
    finally:
        await fake.stop()
    return _mixed_figures(
        "naive: every 30 s, no cap", videos, images, fake, started, commanded, delivered, scale
    )


def print_mixed(results: Sequence[MixedResult], bound: float) -> None:
    """The mixed runs side by side, as a Markdown table."""

    def wait(q: float) -> Callable[[MixedResult], str]:
        def cell(r: MixedResult) -> str:
            if not r.image_waits:
                return "-"
            return f"{statistics.median(r.image_waits) if q == 0.5 else _quantile(r.image_waits, q):.0f} s"

        return cell

    cells: list[tuple[str, Callable[[MixedResult], str]]] = [
        ("videos delivered", lambda r: f"{r.videos_delivered}/{r.videos}"),
        ("images delivered", lambda r: f"{r.images_delivered}/{r.images}"),
        (
            "members' wait (every job), mean",
            lambda r: f"{statistics.fmean(r.waits):.0f} s" if r.waits else "-",
        ),
        ("members' wait (every job), p90", lambda r: f"{_quantile(r.waits, 0.9):.0f} s" if r.waits else "-"),
        ("image command -> file, p50", wait(0.5)),
        ("image command -> file, p90", wait(0.9)),
        ("image command -> file, max", wait(1.0)),
        ("video makespan", lambda r: f"{r.video_makespan:.0f} s"),
        ("video makespan / bound", lambda r: f"{r.video_makespan / bound:.2f}x"),
        ("requests", lambda r: str(r.requests)),
        ("429 answers", lambda r: str(r.rejected)),
        ("busiest rate window", lambda r: f"{r.busiest_window}/{RATE_REQUESTS}"),
        *estimate_error.rows(),
    ]
    table = [["", *(r.label for r in results)]]
    table += [[label, *(cell(r) for r in results)] for label, cell in cells]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    for n, line in enumerate(table):
        print("| " + " | ".join(text.ljust(w) for text, w in zip(line, widths, strict=True)) + " |")
        if n == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


async def main_mixed(guilds: int, scale: float, seed: int, runs: Sequence[Run]) -> None:
    """Run the mixed shape and print its table."""
    videos, images = make_mixed(guilds, seed)
    bound = physical_bound(videos)
    print(
        f"mixed: {len(videos)} videos across {guilds} guilds (durations {DURATION_RANGE[0]:.0f}-"
        f"{DURATION_RANGE[1]:.0f} s, seed {seed}), then {len(images)} images {MIXED_IMAGES_AFTER:g} s later in "
        f"the same guilds; key {RATE_REQUESTS}/{RATE_WINDOW:.0f} s, polls every {POLL_INTERVAL:.0f} s; "
        f"clock x{scale:g}. Times in clock seconds."
    )
    print(f"the videos' physical bound: {bound:.0f} s")
    print(
        f"clairvoyant bound of the members' mean wait: {_clairvoyant(videos, images, MIXED_IMAGES_AFTER):.0f} s"
    )
    results: list[MixedResult] = []
    for run in runs:
        wall = time.monotonic()
        if run == "naive":
            results.append(await run_naive_mixed(videos, images, scale))
        else:
            results.append(await run_core_mixed(videos, images, scale, progress=run == "progress"))
        print(f"  {results[-1].label}: {time.monotonic() - wall:.0f} real seconds", file=sys.stderr)
    print_mixed(results, bound)


# -- the capped shape: a service that refuses creates above K running tasks --------

#: The capped shape: this many videos at once, on a service that runs at most `CAPPED_K` of a key's
#: tasks and refuses (429) a create above that, polls still answered. Durations in clock seconds:
#: 6-12 real seconds at the default x20.
CAPPED_JOBS = 24
CAPPED_K = 3
CAPPED_DURATIONS = (120.0, 240.0)
#: What the capped service's refusal says (None: the fake's "too many tasks are running...").
CAPPED_SAYS: str | None = None


def cap_bound(batch: Sequence[Clip], cap: int) -> float:
    """The capped shape's bound: the durations' sum over the cap (or the physical bound, if larger)."""
    return max(sum(c.duration for c in batch) / cap, physical_bound(batch))


async def main_capped(guilds: int, scale: float, seed: int, runs: Sequence[Run]) -> None:
    """Run the capped shape and print its table."""
    rng = random.Random(seed)
    batch = [
        Clip(
            f"[j{n:03d}]",
            guild=n % guilds,
            member=(n // guilds) // 2,
            duration=rng.uniform(*CAPPED_DURATIONS),
        )
        for n in range(CAPPED_JOBS)
    ]
    bound = cap_bound(batch, CAPPED_K)
    print(
        f"capped: {len(batch)} videos across {guilds} guilds, durations {CAPPED_DURATIONS[0]:.0f}-"
        f"{CAPPED_DURATIONS[1]:.0f} s (seed {seed}); the service refuses creates (429) while the key runs "
        f"{CAPPED_K} tasks; key {RATE_REQUESTS}/{RATE_WINDOW:.0f} s, polls every {POLL_INTERVAL:.0f} s; "
        f"clock x{scale:g}. Times in clock seconds."
    )
    print(f"the cap's bound: {bound:.0f} s (the durations' sum / {CAPPED_K})")
    print(
        f"clairvoyant bound of the members' mean wait (the key's rate only, not the cap): {_clairvoyant(batch):.0f} s"
    )
    results: list[RunResult] = []
    for run in runs:
        wall = time.monotonic()
        if run == "naive":
            results.append(await run_naive(batch, scale, cap=CAPPED_K))
        else:
            results.append(await run_core(batch, scale, progress=run == "progress", cap=CAPPED_K))
        print(f"  {results[-1].label}: {time.monotonic() - wall:.0f} real seconds", file=sys.stderr)
    cells: list[Row] = [
        ("delivered", lambda r: f"{r.delivered}/{r.jobs}"),
        ("makespan", lambda r: f"{r.makespan:.0f} s"),
        ("makespan / cap bound", lambda r: f"{r.makespan / bound:.2f}x"),
        ("members' wait, mean", lambda r: f"{statistics.fmean(r.waits):.0f} s" if r.waits else "-"),
        ("members' wait, p90", lambda r: f"{_quantile(r.waits, 0.9):.0f} s" if r.waits else "-"),
        ("creates sent", lambda r: str(r.creates)),
        ("creates refused (429)", lambda r: str(r.refused_creates)),
        ("refusals per create", lambda r: f"{r.refused_creates / r.creates:.0%}" if r.creates else "-"),
        ("other 429 answers", lambda r: str(r.rejected - r.refused_creates)),
        ("requests per video", lambda r: f"{r.requests / r.delivered:.2f}" if r.delivered else "-"),
        ("busiest rate window", lambda r: f"{r.busiest_window}/{RATE_REQUESTS}"),
        *estimate_error.rows(),
    ]
    table = [["", *(r.label for r in results)]]
    table += [[label, *(cell(r) for r in results)] for label, cell in cells]
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    for n, line in enumerate(table):
        print("| " + " | ".join(text.ljust(w) for text, w in zip(line, widths, strict=True)) + " |")
        if n == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


async def main_async(jobs: int, guilds: int, scale: float, seed: int, runs: Sequence[Run]) -> None:
    """Run the benchmark and print the table."""
    batch = make_batch(jobs, guilds, seed)
    bound = physical_bound(batch)
    print(
        f"{jobs} videos across {guilds} guilds, durations {DURATION_RANGE[0]:.0f}-{DURATION_RANGE[1]:.0f} s "
        f"(seed {seed}; mean {statistics.mean(c.duration for c in batch):.0f} s); key {RATE_REQUESTS}/"
        f"{RATE_WINDOW:.0f} s, polls every {POLL_INTERVAL:.0f} s; clock x{scale:g}. Times in clock seconds."
    )
    print(f"physical bound: {bound:.0f} s ({REQUESTS_PER_VIDEO} requests per video at the key's rate)")
    print(f"clairvoyant bound of the members' mean wait: {_clairvoyant(batch):.0f} s")
    results: list[RunResult] = []
    for run in runs:
        wall = time.monotonic()
        if run == "naive":
            results.append(await run_naive(batch, scale))
        else:
            results.append(await run_core(batch, scale, progress=run == "progress"))
        print(f"  {results[-1].label}: {time.monotonic() - wall:.0f} real seconds", file=sys.stderr)
    print_table(results, bound)


# -- the random-arrival family: members arriving at random, long-tailed durations --

#: Clock seconds a random-arrival run may take at most after the last arrival (a stuck run stops).
RANDOM_DRAIN = 1800.0


@dataclass
class RandomResult:
    """One run of a random-arrival shape, in clock seconds."""

    label: str
    jobs: int
    delivered: int
    waits: list[float]  # command -> file, every delivered job
    image_waits: list[float]  # command -> file, the images
    delays: list[float]  # service completion -> file, the videos
    requests: int
    rejected: int
    busiest_window: int
    estimates: estimate_error.EstimateErrors | None = None


def _random_fake(jobs: Sequence[arrivals.Arrival], scale: float, progress: bool) -> Awaitable[FakeService]:
    clips = [Clip(j.tag, j.guild, j.member, j.duration) for j in jobs if not j.image]
    return fake_for(clips, scale, progress)


def _random_settings(fake: FakeService, data_dir: Path, jobs: Sequence[arrivals.Arrival]) -> Settings:
    return settings_for(fake, data_dir, [Clip(j.tag, j.guild, j.member, j.duration) for j in jobs])


def _random_figures(
    label: str,
    jobs: Sequence[arrivals.Arrival],
    fake: FakeService,
    commanded: dict[str, float],
    delivered: dict[str, float],
    scale: float,
) -> RandomResult:
    authorised = [r for r in fake.requests if r.auth_ok]
    images = {j.tag for j in jobs if j.image}
    completed = {
        tag_of(t.prompt): t.created + t.plan.duration for t in fake.tasks.values() if t.kind == "video"
    }
    waits = {tag: (at - commanded[tag]) * scale for tag, at in delivered.items()}
    return RandomResult(
        label=label,
        jobs=len(jobs),
        delivered=len(delivered),
        waits=list(waits.values()),
        image_waits=[w for tag, w in waits.items() if tag in images],
        delays=[(at - completed[tag]) * scale for tag, at in delivered.items() if tag in completed],
        requests=len(authorised),
        rejected=sum(1 for r in authorised if r.status == 429),
        busiest_window=fake.max_in_window(),
    )


async def _arrive(
    jobs: Sequence[arrivals.Arrival],
    clock: ScaledClock,
    scale: float,
    one: Callable[[arrivals.Arrival], Awaitable[None]],
) -> None:
    """Each job's command at its time (clock seconds from now), all of them kept and awaited."""
    began = time.monotonic()

    async def at_its_time(job: arrivals.Arrival) -> None:
        await clock.sleep(max(0.0, job.at - (time.monotonic() - began) * scale))
        await one(job)

    await asyncio.gather(*(at_its_time(j) for j in jobs))


async def run_core_random(jobs: Sequence[arrivals.Arrival], scale: float, *, progress: bool) -> RandomResult:
    """The real core against the fake; each job accepted at its arrival."""
    clock = ScaledClock(scale)
    fake = await _random_fake(jobs, scale, progress)
    factory = RecordingChatFactory()
    commanded: dict[str, float] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            settings = _random_settings(fake, Path(tmp), jobs)
            core = await Core.open(settings, reporter=factory, clock=clock)
            chat = factory.chat
            assert chat is not None
            try:
                chat.expect(len(jobs))
                chat.start_sampling()

                async def submit(j: arrivals.Arrival) -> None:
                    who = Requester(
                        guild_id=1000 + j.guild,
                        channel_id=2000 + j.guild,
                        user_id=3000 + j.member,
                        locale="en-US",
                    )
                    if j.image:
                        params = core.intake.image_params(
                            guild_id=who.guild_id, prompt=j.prompt, model=None, size=None,
                            known_models=(), default_model=settings.gen_image_model,
                        )  # fmt: skip
                    else:
                        params = core.intake.video_params(
                            guild_id=who.guild_id, prompt=j.prompt, model=None, size=None, seconds=None,
                            frame_rate=None, known_models=(), default_model=settings.gen_video_model,
                        )  # fmt: skip
                    commanded[j.tag] = time.monotonic()
                    job, _ = await core.intake.accept(
                        who, JobKind.IMAGE if j.image else JobKind.VIDEO, params
                    )
                    await chat.job_changed(job, urgent=True)

                limit = (arrivals.MINUTES * 60 + RANDOM_DRAIN) / scale
                try:
                    await asyncio.wait_for(
                        asyncio.gather(_arrive(jobs, clock, scale, submit), chat.all_done.wait()), limit
                    )
                except TimeoutError:
                    print(f"(a run gave up after {limit:.0f} real seconds; its figures cover what finished)")
            finally:
                await core.close()
    finally:
        await fake.stop()
    delivered = {
        tag_of(t.job.params["prompt"]): t.delivered for t in chat.tracks.values() if t.delivered is not None
    }
    code = f" ({CODE})" if CODE else ""
    label = f"framecast{code}, {'with' if progress else 'no'} progress"
    result = _random_figures(label, jobs, fake, commanded, delivered, scale)
    result.estimates = _shown_errors(chat.tracks.values(), scale)
    return result


async def run_naive_random(jobs: Sequence[arrivals.Arrival], scale: float) -> RandomResult:
    """The naive bot (see :func:`run_naive`): each job created at its arrival as the budget allows,
    a video polled every 30 s, each result downloaded."""
    clock = ScaledClock(scale)
    fake = await _random_fake(jobs, scale, progress=True)
    delivered: dict[str, float] = {}
    commanded: dict[str, float] = {}
    size = presets.VIDEO_SIZES[presets.DEFAULT_VIDEO_SIZE]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            s = _random_settings(fake, Path(tmp), jobs)
            budget = RequestBudget(
                s.gen_rate_limit.requests,
                s.gen_rate_limit.window,
                clock=clock,
                backoff_base=s.gen_backoff_base,
                backoff_max=s.gen_backoff_max,
            )
            async with aiohttp.ClientSession() as session:
                client = GenerationClient.from_settings(session, s, budget, clock)
                client._transport.refusals = _NaiveRefusals()

                async def one(j: arrivals.Arrival) -> None:
                    commanded[j.tag] = time.monotonic()
                    if j.image:
                        square = presets.IMAGE_SIZES[presets.DEFAULT_IMAGE_SIZE]
                        result = await client.create_image(
                            ImageParams(model=s.gen_image_model, prompt=j.prompt, size=square.size)
                        )
                        url = result.url
                    else:
                        params = VideoParams(
                            model=s.gen_video_model, prompt=j.prompt, width=size.width, height=size.height,
                            num_frames=presets.num_frames(presets.DEFAULT_VIDEO_SECONDS, presets.DEFAULT_FRAME_RATE),
                            frame_rate=presets.DEFAULT_FRAME_RATE,
                        )  # fmt: skip
                        task_id = await client.create_video(params)
                        status = await client.wait_video(
                            task_id, interval=s.gen_poll_interval, timeout=s.gen_poll_timeout
                        )
                        url = status.result_url
                    assert url is not None
                    await client.download(
                        url, max_bytes=s.gen_download_max_bytes, timeout=s.gen_download_timeout
                    )
                    delivered[j.tag] = time.monotonic()

                limit = (arrivals.MINUTES * 60 + RANDOM_DRAIN) / scale
                try:
                    await asyncio.wait_for(_arrive(jobs, clock, scale, one), limit)
                except TimeoutError:
                    print(f"(a run gave up after {limit:.0f} real seconds; its figures cover what finished)")
                finally:
                    await client.close()
                    budget.close()
    finally:
        await fake.stop()
    return _random_figures("naive: every 30 s, no cap", jobs, fake, commanded, delivered, scale)


def _random_row(result: RandomResult, load: float, seed: int, guilds: int, bound: float) -> str:
    """One run as a Markdown row (see :func:`main_random` for the columns)."""

    def q(values: list[float], p: float) -> str:
        return f"{_quantile(values, p):.0f}" if values else "-"

    waits = result.waits
    delay = f"{statistics.median(result.delays) / POLL_INTERVAL:.2f}" if result.delays else "-"
    errors = result.estimates

    def err(values: list[float] | None, signed: list[float] | None = None) -> str:
        if not values:
            return "-"
        bias = f" ({statistics.median(signed):+.0%})" if signed else ""
        return f"{statistics.median(values):.0%}{bias}"

    return (
        f"| {load:.0%} | {seed} | {guilds} | {result.label} | {result.delivered}/{result.jobs} | "
        f"{statistics.fmean(waits):.0f} | {q(waits, 0.9)} | {bound:.0f} | {q(result.image_waits, 0.9)} | {delay} | "
        f"{err(errors.starts if errors else None, errors.starts_signed if errors else None)} | "
        f"{err(errors.left if errors else None, errors.left_signed if errors else None)} | "
        f"{result.requests / max(1, result.delivered):.2f} | {result.rejected} | {result.busiest_window}/{RATE_REQUESTS} |"
    )


RANDOM_HEADER = (
    "| load | seed | servers | run | delivered | wait mean (s) | wait p90 (s) | clairvoyant bound, mean (s) | "
    'image wait p90 (s) | completion -> file, median (x poll) | "starts in" error, median (bias) | '
    '"left" error, median (bias) | requests per job | 429 | busiest window |\n'
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


async def main_random(
    loads: Sequence[float], seeds: Sequence[int], scale: float, runs: Sequence[Run]
) -> None:
    """Run the random-arrival shapes and print one row per run."""
    print(
        f"random arrivals for {arrivals.MINUTES:g} min at a share of what the key carries "
        f"({arrivals.carried_per_second(RATE_REQUESTS, RATE_WINDOW) * 60:.2f} jobs a minute); durations "
        f"log-normal (median {arrivals.MEDIAN:g} s, sigma {arrivals.SIGMA:g}); {arrivals.IMAGES:.0%} images; "
        f"key {RATE_REQUESTS}/{RATE_WINDOW:.0f} s, polls every {POLL_INTERVAL:.0f} s; clock x{scale:g}. "
        "Times in clock seconds."
    )
    print(RANDOM_HEADER)
    for load in loads:
        for seed in seeds:
            jobs, guilds = arrivals.make_arrivals(load, seed, requests=RATE_REQUESTS, window=RATE_WINDOW)
            bound = arrivals.clairvoyant_mean_wait(jobs, requests=RATE_REQUESTS, window=RATE_WINDOW)
            for run in runs:
                wall = time.monotonic()
                if run == "naive":
                    result = await run_naive_random(jobs, scale)
                else:
                    result = await run_core_random(jobs, scale, progress=run == "progress")
                print(_random_row(result, load, seed, guilds, bound), flush=True)
                print(f"  {result.label}: {time.monotonic() - wall:.0f} real seconds", file=sys.stderr)


def _beside(rev: str) -> None:
    """``--beside REV``: this tree's code and the code of `rev` (``--code REV``) run the same shape in
    two processes at the same time, so both meet the same load on the machine (runs of the same
    code minutes apart differ by several seconds of wait); their tables are printed one after the
    other, `rev`'s first."""
    argv = sys.argv[1:]
    at = argv.index("--beside")
    argv = argv[:at] + argv[at + 2 :]
    runs = [
        subprocess.Popen([sys.executable, __file__, *extra, *argv], stdout=subprocess.PIPE, text=True)
        for extra in (["--code", rev], [])
    ]
    for run in runs:
        out, _ = run.communicate()
        print(out, end="", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=48)
    parser.add_argument("--guilds", type=int, default=4)
    parser.add_argument("--scale", type=float, default=20.0, help="clock seconds per real second")
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument(
        "--runs", default=",".join(RUNS), help=f"which runs, comma-separated, of {', '.join(RUNS)}"
    )
    parser.add_argument(
        "--shape",
        default="videos",
        choices=("videos", "mixed", "capped", "random"),
        help="videos: --jobs videos at once; mixed: 36 videos, then 12 images 8 s later; capped: 24 videos on a service running 3 tasks at most",
    )
    parser.add_argument(
        "--cap-says",
        default=None,
        help='capped shape: what the refusal says (e.g. "Rate limit exceeded"; default: too many tasks)',
    )
    parser.add_argument("--loads", default="0.4,0.8,1.1", help="random shape: shares of what the key carries")
    parser.add_argument("--seeds", default="1,2,3", help="random shape: the seeds, comma-separated")
    parser.add_argument(
        "--code", default=None, help="run the framecast of this git commit (see _code_from_git)"
    )
    parser.add_argument(
        "--beside",
        default=None,
        metavar="REV",
        help="also run the same shape on the framecast of this commit, at the same time (see _beside)",
    )
    args = parser.parse_args()
    if args.beside:
        _beside(args.beside)
        return
    names = [r for r in args.runs.split(",") if r]
    unknown = [r for r in names if r not in RUNS]
    if unknown:
        parser.error(f"unknown run(s): {', '.join(unknown)}")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.shape == "random":
        loads = [float(x) for x in args.loads.split(",") if x]
        seeds = [int(x) for x in args.seeds.split(",") if x]
        asyncio.run(main_random(loads, seeds, args.scale, [RUNS[r] for r in names]))
        return
    if args.shape == "capped":
        global CAPPED_SAYS
        CAPPED_SAYS = args.cap_says
        asyncio.run(main_capped(args.guilds, args.scale, args.seed, [RUNS[r] for r in names]))
        return
    if args.shape == "mixed":
        asyncio.run(main_mixed(args.guilds, args.scale, args.seed, [RUNS[r] for r in names]))
        return
    asyncio.run(main_async(args.jobs, args.guilds, args.scale, args.seed, [RUNS[r] for r in names]))


if __name__ == "__main__":
    main()
