"""Accounts: which API key, budget, service client and planner each server's jobs run on.

The one package that puts a key's parts together: a budget (:mod:`framecast.keys`), a client
(:mod:`framecast.service`) and a planner (:mod:`framecast.planner`), per key, shared by every server
that set it. It sits above ``keys``, ``service``, ``planner``, ``jobs`` and ``storage`` and below
the application (``framecast.app``), which opens it in ``core.py``. The runner and the scheduler
reach it only through their own protocols (``framecast.jobs.job_keys``: ``JobAccounts``,
``KeyAccount``; ``framecast.jobs.scheduler``: ``AccountAdmission``), so ``jobs`` never imports it.

* :mod:`~framecast.accounts.parts`: ``KeyParts`` (one key's budget, client and planner),
  ``Account`` (one server's use of a key) and ``KeyCheck``;
* :mod:`~framecast.accounts.accounts`: ``Accounts``, the operator's account and the servers' own.
"""

from framecast.accounts.accounts import Accounts
from framecast.accounts.parts import Account, KeyCheck, KeyParts, can_be_key

__all__ = ["Account", "Accounts", "KeyCheck", "KeyParts", "can_be_key"]
