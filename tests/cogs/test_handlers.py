"""The interactions being handled (``cogs.tree.Handlers``): who joins, and what a stop does with
them: waits for them within its bound, then cuts off the rest without leaving an unread exception
(no Discord needed; the stop itself, with the real bot.py: tests/e2e/test_stop_answers_interactions.py)."""

from __future__ import annotations

import asyncio
import gc
import logging
from types import SimpleNamespace
from typing import Any

import discord
import pytest

from cogs.tree import FramecastTree, Handlers, defer, handling
from cogs.views.buttons import ButtonAction, _JobButton


def _tree() -> FramecastTree:
    return FramecastTree(discord.Client(intents=discord.Intents.none()))


def _interaction(tree: FramecastTree, **fields: Any) -> Any:
    return SimpleNamespace(client=SimpleNamespace(tree=tree), **fields)


class _Unread:
    """Collects what asyncio would log as "Task exception was never retrieved"."""

    def __init__(self) -> None:
        self.contexts: list[dict[str, Any]] = []

    def __enter__(self) -> _Unread:
        self._loop = asyncio.get_running_loop()
        self._before = self._loop.get_exception_handler()
        self._loop.set_exception_handler(lambda _, context: self.contexts.append(context))
        return self

    def __exit__(self, *_: object) -> None:
        gc.collect()  # an unread task's exception is reported when the task is collected
        self._loop.set_exception_handler(self._before)


async def test_a_handler_joins_once_and_leaves_when_its_task_ends() -> None:
    handlers = Handlers()
    go = asyncio.Event()

    async def handler() -> None:
        handlers.track()
        handlers.track()
        await go.wait()

    task = asyncio.create_task(handler())
    await asyncio.sleep(0)
    assert len(handlers) == 1
    go.set()
    await task
    assert len(handlers) == 0
    assert await handlers.finish(1.0) == (0, 0)


async def test_the_stop_waits_for_every_handler_those_starting_meanwhile_too() -> None:
    handlers = Handlers()
    answered: list[str] = []
    first_waits, second_started = asyncio.Event(), asyncio.Event()

    async def second() -> None:
        handlers.track()
        second_started.set()
        await asyncio.sleep(0.05)
        answered.append("second")

    async def first() -> None:
        handlers.track()
        await first_waits.wait()
        answered.append("first")

    one = asyncio.create_task(first())
    await asyncio.sleep(0)
    stop = asyncio.create_task(handlers.finish(5.0))
    await asyncio.sleep(0)
    two = asyncio.create_task(second())  # a command that arrived during the stop
    await second_started.wait()
    first_waits.set()
    assert await stop == (2, 0)
    assert sorted(answered) == ["first", "second"] and one.done() and two.done()


async def test_handlers_past_the_bound_are_cut_off_and_nothing_is_left_unread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    handlers = Handlers()
    never = asyncio.Event()
    with _Unread() as unread:

        async def stuck() -> None:
            handlers.track()
            await never.wait()

        async def fails_on_its_way_out() -> None:
            handlers.track()
            try:
                await never.wait()
            finally:
                raise RuntimeError("Session is closed")  # noqa: B012 - a handler's late failure

        async def fails_in_time() -> None:
            handlers.track()
            await asyncio.sleep(0)
            raise RuntimeError("a bug")

        tasks = [asyncio.create_task(c()) for c in (stuck, fails_on_its_way_out, fails_in_time)]
        await asyncio.sleep(0)
        with caplog.at_level(logging.INFO, logger="cogs.tree"):
            assert await handlers.finish(0.1) == (3, 2)
        assert all(task.done() for task in tasks)
        del tasks
    assert unread.contexts == []
    # A handler that failed during the stop is logged with its traceback, as asyncio would have.
    assert "an interaction handler failed during the stop" in caplog.text and "a bug" in caplog.text
    assert "cut off by the stop ended with RuntimeError" in caplog.text


async def test_a_bound_already_spent_cuts_off_at_once() -> None:
    handlers = Handlers()

    async def handler() -> None:
        handlers.track()
        await asyncio.Event().wait()

    task = asyncio.create_task(handler())
    await asyncio.sleep(0)
    assert await handlers.finish(-1.0) == (1, 1)
    assert task.cancelled()


async def test_the_stop_never_waits_for_itself() -> None:
    handlers = Handlers()
    handlers.track()  # close() called from inside a handler's task
    loop = asyncio.get_running_loop()
    began = loop.time()
    assert await handlers.finish(5.0) == (0, 0)
    assert loop.time() - began < 1.0


async def test_every_command_every_acknowledgement_and_every_job_button_is_a_handler() -> None:
    tree = _tree()
    seen: list[int] = []

    async def command() -> None:
        assert await tree.interaction_check(_interaction(tree))
        seen.append(len(tree.handlers))

    await asyncio.create_task(command())

    class Response:
        def __init__(self) -> None:
            self.deferred = False

        async def defer(self, **kwargs: Any) -> None:
            seen.append(len(tree.handlers))

    async def acknowledged() -> None:
        await defer(_interaction(tree, response=Response()), thinking=True)

    await asyncio.create_task(acknowledged())

    class Clicked(_JobButton, template=r"framecast:cancel:(?P<job_id>[0-9]+)"):
        action = ButtonAction.CANCEL

        async def clicked(self, interaction: discord.Interaction[Any]) -> None:
            seen.append(len(tree.handlers))

    await asyncio.create_task(Clicked(1).callback(_interaction(tree)))
    assert seen == [1, 1, 1]
    assert len(tree.handlers) == 0


async def test_an_interaction_of_no_framecast_tree_is_not_counted() -> None:
    bare: Any = SimpleNamespace(locale="en-US")  # e.g. the tests' bare interactions
    treeless: Any = SimpleNamespace(client=SimpleNamespace(tree=None))
    handling(bare)  # nothing to count them in, and nothing raised
    handling(treeless)
