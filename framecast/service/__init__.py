"""The generation-service client (see ``SERVICE_API.md``): patient, liberal in what it accepts,
strict in what it reports, and never spending more than the shared :class:`RequestBudget` allows.

Every request to the service carries ``Authorization: Bearer <key>`` and goes through the budget,
including retries and downloads of the service's own result URLs. The key never appears in an
exception, a log line or a repr.

The service is also untrusted (its answers may be broken or hostile): every answer is read with a
size cap counted after decompression, parsed by pure functions that raise only the documented
errors (so no answer can crash a job), and every text taken from it is made safe with
:func:`~framecast.safetext.clean_text`. Result URLs are fetched only over ``http(s)``, from the
service's origin or from hosts :mod:`~framecast.service.netguard` lets through.

The modules, from the bottom up:

* :mod:`~framecast.service.types`: the values taken and given (``VideoParams``, ``TaskStatus``...).
* :mod:`~framecast.service.jsonread`: strict JSON reading (:func:`load_json`).
* :mod:`~framecast.service.fields`: progress and ``Retry-After``, read loosely.
* :mod:`~framecast.service.parsing`: the lenient parsers of whole answers and error bodies.
* :mod:`~framecast.service.body`: reading a body with a cap counted after decompression.
* :mod:`~framecast.service.refusals`: which kind a create's 429 is (the key's rate, or the
  tasks it may run at once).
* :mod:`~framecast.service.transport`: the one request loop (budget slot, retries and backoff,
  caps, error mapping) behind API calls and downloads alike.
* :mod:`~framecast.service.netguard` and :mod:`~framecast.service.download`: where results may
  be fetched from, and fetching them.
* :mod:`~framecast.service.client`: :class:`GenerationClient`, the operations on top.
"""

from framecast.service.client import GenerationClient
from framecast.service.fields import normalize_progress, parse_retry_after
from framecast.service.jsonread import JSON_MAX_DEPTH, load_json
from framecast.service.parsing import (
    error_detail,
    parse_image_answer,
    parse_model_list,
    parse_poll,
    parse_task_id,
)
from framecast.service.types import ImageParams, ImageResult, ModelCatalog, PollPacer, TaskStatus, VideoParams

__all__ = [
    "JSON_MAX_DEPTH",
    "GenerationClient",
    "ImageParams",
    "ImageResult",
    "ModelCatalog",
    "PollPacer",
    "TaskStatus",
    "VideoParams",
    "error_detail",
    "load_json",
    "normalize_progress",
    "parse_image_answer",
    "parse_model_list",
    "parse_poll",
    "parse_retry_after",
    "parse_task_id",
]
