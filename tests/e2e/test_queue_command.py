"""``/queue`` with many jobs from many members: a bounded, localised list that pings nobody."""

from __future__ import annotations

from tests.e2e.commands import FOREVER
from tests.e2e.harness import StartWorld
from tests.fakes.gen_service import TaskPlan


async def test_queue_with_many_jobs_from_many_members(start: StartWorld) -> None:
    world = await start(members=6, extra_env={"GEN_MAX_RUNNING": "1", "MEMBER_JOB_LIMIT": "5"})
    world.service.default_plan = TaskPlan(polls=FOREVER)
    for i in range(4):  # 24 videos: one runs, 23 wait (under the queue cap of 25)
        for member in world.members[0]:
            await world.video(f"job {i} of {member.name}", member=member)
    viewer = world.members[0][3]
    it = await world.discord.slash(world.guild, world.channel, viewer, "queue", locale="pl")
    await it.wait_response()
    reply = await it.wait_original(lambda m: bool(m.embeds))
    embed = reply.embeds[0]
    rows = embed["description"].splitlines()
    assert len(rows) == 21 and rows[-1] == "…i jeszcze 4", rows[-1]  # 20 rows, then "…and 4 more" in Polish
    assert embed["footer"]["text"].endswith("1 · w kolejce: 23") or "23" in embed["footer"]["text"], embed
    assert not reply.pinged_user_ids and not reply.pinged_everyone
    assert len(embed["description"]) <= 4096
    assert any(f"<@{viewer.id}>" in row for row in rows[:20])
    assert "{" not in embed["description"] and "{" not in embed["footer"]["text"]
