"""Members arriving at random moments (issue 34, item 6): the shapes the planner was not tuned on.

``bench_planner.py``'s batch shapes accept every job at once with durations drawn uniformly from
60 to 180 s; a server is used otherwise. This family draws, with a fixed seed:

* **arrivals**: a Poisson process for ``MINUTES`` clock minutes, at a share (``load``) of what the
  key carries: ``RATE_REQUESTS / RATE_WINDOW`` requests a second over what a job costs at the least
  (a video 3 requests, an image 2, so 2.8 on average at 20 % images): 40 % is a quiet key, 80 % a
  busy one, 110 % more than the key can serve (the queue grows for the whole 20 minutes);
* **durations**: log-normal, median 90 s, sigma 0.65 (5-95 % about 31-263 s: a long tail);
* **kinds**: one job in five an image (answered with its file by the create);
* **servers**: 1 to 8 (drawn), each job's server and member drawn among them.

:func:`clairvoyant_mean_wait` is the distance to the physical limit: a lower bound of the members'
mean wait that no planner can beat, even one that knew every duration in advance. The k-th file
cannot arrive before the k-th earliest "arrival + generation" has ended, nor before the key has
spent the requests of the k cheapest jobs (16 a window, from the first arrival). On a batch (all
arrivals at 0) that is the issue's figure: 3k requests, the k-th shortest generation.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

__all__ = ["MINUTES", "Arrival", "clairvoyant_mean_wait", "make_arrivals"]

#: How long members keep arriving (clock minutes).
MINUTES = 20.0
#: The durations' log-normal: median (clock seconds) and sigma (log units).
MEDIAN, SIGMA = 90.0, 0.65
#: The share of images among the jobs.
IMAGES = 0.2
#: Requests a job costs at the least: a video's create, the poll that sees it done and the download;
#: an image's create and download.
VIDEO_COST, IMAGE_COST = 3, 2


@dataclass(frozen=True)
class Arrival:
    """One member's command: when (clock seconds from the start), where, what, and how long it takes."""

    tag: str  # unique marker inside the prompt (``[jNNN]``)
    guild: int
    member: int
    at: float
    image: bool
    duration: float  # the service's time for a video (0 for an image: answered by its create)

    @property
    def prompt(self) -> str:
        """The prompt sent for this job."""
        return f"a benchmark clip {self.tag}"

    @property
    def cost(self) -> int:
        """Requests the job costs at the least."""
        return IMAGE_COST if self.image else VIDEO_COST


def carried_per_second(requests: int, window: float) -> float:
    """Jobs a second the key carries at the least cost per job (the family's 100 %)."""
    mean_cost = IMAGES * IMAGE_COST + (1 - IMAGES) * VIDEO_COST
    return requests / window / mean_cost


def make_arrivals(load: float, seed: int, *, requests: int, window: float) -> tuple[list[Arrival], int]:
    """The jobs of one run at `load` (a share of what the key carries) and the servers they come from."""
    rng = random.Random(seed * 1000 + round(load * 100))
    guilds = rng.randint(1, 8)
    rate = load * carried_per_second(requests, window)
    out: list[Arrival] = []
    at = rng.expovariate(rate)
    while at < MINUTES * 60:
        guild = rng.randrange(guilds)
        image = rng.random() < IMAGES
        duration = 0.0 if image else MEDIAN * math.exp(rng.gauss(0.0, SIGMA))
        out.append(Arrival(f"[j{len(out):03d}]", guild, rng.randrange(6), at, image, duration))
        at += rng.expovariate(rate)
    return out, guilds


def clairvoyant_mean_wait(jobs: list[Arrival], *, requests: int, window: float) -> float:
    """A lower bound of the members' mean wait, command to file (see the module docstring)."""
    if not jobs:
        return 0.0
    start = min(j.at for j in jobs)
    ends = sorted(j.at + j.duration for j in jobs)
    spent = 0
    total = 0.0
    for k, cost in enumerate(sorted(j.cost for j in jobs)):
        spent += cost
        by_rate = start + window * ((spent - 1) // requests)
        total += max(ends[k], by_rate)
    return (total - sum(j.at for j in jobs)) / len(jobs)
