from tests.harness import World, status_of


async def test_video_is_delivered_as_a_file(world: World) -> None:
    it = await world.video("a red fox running through snow")
    assert it.ack_latency < 3
    msg = await world.delivered(it)
    assert status_of(msg).startswith("✅")
