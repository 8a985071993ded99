"""The Discord side of delivery: each job's message, from the command's answer to the result.

:class:`DiscordReporter` implements the core's ``JobReporter``; the modules beside it each do one
job: :mod:`.placement` (interaction token or channel message, and moving), :mod:`.codes` (Discord's
error codes), :mod:`.worker` (one coalescing writer per job), :mod:`.retries`, :mod:`.recovery`,
:mod:`.ping`, :mod:`.lookup` (``/job``), :mod:`.limits` (upload sizes) and :mod:`.notes`.
"""

from cogs.delivery.lookup import result_attachments
from cogs.delivery.reporter import DiscordReporter

__all__ = ["DiscordReporter", "result_attachments"]
