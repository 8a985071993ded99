"""The Discord side of delivery: each job's message, from the command's answer to the result.

One delivery flows one way, top to bottom: :class:`DiscordReporter` (the core's ``ChatSide``) hands
the result to the job's worker (:mod:`.worker`, the one writer of its message), which puts it on the
message through :mod:`.placement` (interaction token or channel message, and moving), which draws
through :mod:`.drawing` and mentions the requester through :mod:`.ping`; the outcome goes back up as
a return value. Beside them: the job's bookkeeping as a typed record (:mod:`.record`), Discord's
error codes (:mod:`.codes`), the nonces that make a post sent again no second message
(:mod:`.nonces`), :mod:`.retries`, :mod:`.recovery` ("is it there already?"),
:mod:`.lookup` (``/job``), :mod:`.limits` (upload sizes), :mod:`.notes`, :mod:`.timings`, and
:mod:`.key_notice` (telling a server's admins that the service refused its key).

Nothing is imported here: importing one module of the package (its error codes, say) runs no other.
"""
