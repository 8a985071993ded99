"""The application: what members, server admins and the operator can do, as typed use cases.

This package is the Discord edge's only door into the core: ``cogs/`` imports from
``framecast.app`` and nothing else of ``framecast``. Each submodule names what it exports in
``__all__``; they are gathered here so a cog writes ``from framecast.app import ...``.

* :mod:`framecast.app.values`: the value types use cases return (jobs, enums, settings records);
* :mod:`framecast.app.members`: request, cancel, retry, again, remix, show a job, the queue, models;
* :mod:`framecast.app.deletion`: delete a delivered result; :mod:`framecast.app.history`: /history;
* :mod:`framecast.app.parked`: hand a result that could be posted nowhere to its requester (/job);
* :mod:`framecast.app.places_gone`: end the jobs of a deleted channel, or of a server the bot left;
* :mod:`framecast.app.actors`: who acts (:class:`Actor`), and who may administer a server;
* :mod:`framecast.app.admins`: show and change settings, set and remove a server's key;
* :mod:`framecast.app.styles`: a server's named prompt styles (/settings styles, ``style:``);
* :mod:`framecast.app.chat`: the protocol the chat side implements to show and deliver jobs;
* :mod:`framecast.app.gallery`, :mod:`framecast.app.web_sessions`, :mod:`framecast.app.web`: the web
  pages' use cases (the gallery, sessions, usage) and the bundle the web edge is given.

The core itself is assembled in :mod:`framecast.app.core` (``bot.py`` opens and closes it).
"""

from framecast.app import (
    actors,
    admins,
    chat,
    deletion,
    gallery,
    history,
    members,
    my_jobs,
    parked,
    places_gone,
    styles,
    usage,
    values,
    web,
    web_sessions,
)
from framecast.app.actors import *  # noqa: F403
from framecast.app.admins import *  # noqa: F403
from framecast.app.chat import *  # noqa: F403
from framecast.app.deletion import *  # noqa: F403
from framecast.app.gallery import *  # noqa: F403
from framecast.app.history import *  # noqa: F403
from framecast.app.members import *  # noqa: F403
from framecast.app.my_jobs import *  # noqa: F403
from framecast.app.parked import *  # noqa: F403
from framecast.app.places_gone import *  # noqa: F403
from framecast.app.styles import *  # noqa: F403
from framecast.app.usage import *  # noqa: F403
from framecast.app.values import *  # noqa: F403
from framecast.app.web import *  # noqa: F403
from framecast.app.web_sessions import *  # noqa: F403

__all__ = [
    *values.__all__,
    *actors.__all__,
    *members.__all__,
    *admins.__all__,
    *chat.__all__,
    *deletion.__all__,
    *history.__all__,
    *parked.__all__,
    *places_gone.__all__,
    *styles.__all__,
    *gallery.__all__,
    *usage.__all__,
    *my_jobs.__all__,
    *web.__all__,
    *web_sessions.__all__,
]
