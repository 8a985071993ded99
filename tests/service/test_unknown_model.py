"""A create refused because the service does not know the model is told apart from other refusals.

The contract shows no error body, so the client reads any reasonable shape: a 400 (or 404/422) whose
message says something does not exist and names the model (or the word "model"). A 400 for any
other reason stays a plain :class:`RequestRejected`.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from framecast.clock import SystemClock
from framecast.config import Secret
from framecast.keys.budget import RequestBudget
from framecast.service import GenerationClient, ImageParams, VideoParams
from framecast.service.errors import RequestRejected, UnknownModel, refused_model
from framecast.service.parsing import error_detail
from tests.fakes.gen_service import IMAGE_MODEL, VIDEO_MODEL, FakeService

MODEL = VIDEO_MODEL

#: How services word "no such model" (the fake's own shape first).
MISSING_MESSAGES = [
    "The model `svc-video-v2.0` does not exist",
    "The model `svc-video-v2.0` does not exist or you do not have access to it.",
    "model 'svc-video-v2.0' not found",
    "Model svc-video-v2.0 doesn't exist",
    "Unknown model: svc-video-v2.0",
    "unknown model",
    "model_not_found",
    "MODEL_NOT_FOUND",
    "Invalid model",
    "No such model: svc-video-v2.0",
    "svc-video-v2.0 is not available",
    "svc-video-v2.0 has been deprecated",
    "The requested model is not supported",
    "模型不存在: svc-video-v2.0 does not exist",
]
#: 400s for other reasons: they must stay plain refusals.
PLAIN_MESSAGES = [
    "the request body must be a JSON object",
    "prompt is too long",
    "width must be at most 1280",
    "num_frames must be between 9 and 257",
    "too many tasks are running for this key",
    "invalid prompt",
    "the video_id does not exist",
    "content policy violation",
    "Bad Request",
]


def rejected(detail: str | None, status: int = 400) -> RequestRejected:
    return RequestRejected(status=status, detail=detail)


@pytest.mark.parametrize("message", MISSING_MESSAGES)
def test_a_400_saying_the_model_does_not_exist_is_an_unknown_model(message: str) -> None:
    refused = refused_model(rejected(message), MODEL)
    assert isinstance(refused, UnknownModel)
    assert refused.model == MODEL and refused.status == 400 and refused.detail == message
    assert refused.code == rejected(message).code  # unhandled, it fails a job exactly as before


@pytest.mark.parametrize("message", PLAIN_MESSAGES)
def test_a_400_for_another_reason_stays_a_plain_refusal(message: str) -> None:
    refused = rejected(message)
    assert refused_model(refused, MODEL) is refused


@pytest.mark.parametrize("status", [404, 422])
def test_other_client_statuses_that_name_a_missing_model_count_too(status: int) -> None:
    assert isinstance(refused_model(rejected("model not found", status), MODEL), UnknownModel)


@pytest.mark.parametrize("status", [403, 409, 413, 451])
def test_statuses_that_mean_something_else_never_do(status: int) -> None:
    refused = rejected("The model `svc-video-v2.0` does not exist", status)
    assert refused_model(refused, MODEL) is refused


def test_a_refusal_without_any_message_stays_plain() -> None:
    refused = rejected(None)
    assert refused_model(refused, MODEL) is refused


# -- odd bodies, as the transport reads them (error_detail), then classified ----------------------

_WRAPPERS = [
    lambda m: {"error": {"message": m, "type": "invalid_request_error", "code": "model_not_found"}},
    lambda m: {"error": m},
    lambda m: {"message": m},
    lambda m: {"detail": m},
    lambda m: {"detail": [{"msg": m, "loc": ["body", "model"]}]},
    lambda m: {"errors": [{"message": m}]},
    lambda m: {"error": {"code": 400, "msg": m}},
    lambda m: {"error_description": m, "status": 400},
    lambda m: [m],
    lambda m: m,  # plain text, not JSON
]


def _body(wrap: Any, message: str) -> bytes:
    shaped = wrap(message)
    return shaped.encode() if isinstance(shaped, str) else json.dumps(shaped).encode()


@given(wrap=st.sampled_from(_WRAPPERS), message=st.sampled_from(MISSING_MESSAGES))
def test_any_shape_of_a_missing_model_body_is_recognised(wrap: Any, message: str) -> None:
    refused = refused_model(rejected(error_detail(_body(wrap, message))), MODEL)
    assert isinstance(refused, UnknownModel)


@given(wrap=st.sampled_from(_WRAPPERS), message=st.sampled_from(PLAIN_MESSAGES))
def test_any_shape_of_another_refusal_stays_plain(wrap: Any, message: str) -> None:
    refused = rejected(error_detail(_body(wrap, message)))
    assert refused_model(refused, MODEL) is refused


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


@given(body=st.one_of(_JSON.map(lambda v: json.dumps(v).encode()), st.binary(max_size=200)))
def test_any_odd_400_body_is_classified_without_raising(body: bytes) -> None:
    refused = rejected(error_detail(body))
    result = refused_model(refused, MODEL)
    assert result is refused or isinstance(result, UnknownModel)
    if isinstance(result, UnknownModel):
        assert result.detail == refused.detail and result.detail  # only a message can say it


@given(detail=st.text(max_size=120), status=st.integers(100, 599))
def test_only_a_client_error_with_a_message_can_be_an_unknown_model(detail: str, status: int) -> None:
    result = refused_model(rejected(detail, status), MODEL)
    if isinstance(result, UnknownModel):
        assert status in (400, 404, 422)
        assert "model" in detail.lower() or MODEL in detail.lower()


# -- through the real client, against the fake service ---------------------------------------------


@pytest.fixture
async def client(fake_service: FakeService) -> AsyncIterator[GenerationClient]:
    clock = SystemClock()
    session = aiohttp.ClientSession()
    client = GenerationClient(
        session,
        base_url=fake_service.base_url,
        api_key=Secret(fake_service.api_key),
        budget=RequestBudget(1000, 1.0, clock=clock, backoff_base=0.01, backoff_max=0.1),
        clock=clock,
        request_timeout=5,
        retry_max=2,
        backoff_base=0.01,
        backoff_max=0.1,
        rng=random.Random(1),
    )
    try:
        yield client
    finally:
        await client.close()
        await session.close()


def video(model: str = MODEL) -> VideoParams:
    return VideoParams(model=model, prompt="a river", width=64, height=64, num_frames=12, frame_rate=12)


async def test_a_create_for_a_renamed_video_model_raises_unknown_model(
    fake_service: FakeService, client: GenerationClient
) -> None:
    fake_service.rename_model(MODEL, "svc-video-v2.1")
    with pytest.raises(UnknownModel) as caught:
        await client.create_video(video())
    assert caught.value.model == MODEL and caught.value.status == 400
    assert await client.create_video(video("svc-video-v2.1"))  # the new name is accepted


async def test_a_create_for_a_renamed_image_model_raises_unknown_model(
    fake_service: FakeService, client: GenerationClient
) -> None:
    fake_service.rename_model(IMAGE_MODEL, "svc-image-2.2-flash")
    with pytest.raises(UnknownModel) as caught:
        await client.create_image(ImageParams(model=IMAGE_MODEL, prompt="a cat", size="64x64"))
    assert caught.value.model == IMAGE_MODEL


async def test_a_create_refused_for_another_reason_is_a_plain_rejection(
    fake_service: FakeService, client: GenerationClient
) -> None:
    fake_service.path_scripted["/v1/videos"] = [(400, {"error": {"message": "prompt is too long"}}, None)]
    with pytest.raises(RequestRejected) as caught:
        await client.create_video(video())
    assert type(caught.value) is RequestRejected and caught.value.detail == "prompt is too long"
