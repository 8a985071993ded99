"""The value types the application hands to the Discord edge (re-exported by :mod:`framecast.app`).

The edge imports nothing else from the core: these are plain data (records, enums, presets) it
reads to word a reply; the rules that produce them live in the use cases.
"""

from __future__ import annotations

from framecast.app.problems import IntakeError, IntakeProblem
from framecast.clock import Clock
from framecast.guilds.settings import (
    GuildSettings,
    KeyStatus,
    Policy,
    Setting,
    SettingsError,
    SettingsProblem,
    Source,
)
from framecast.planner.estimate import Estimate
from framecast.storage import StoreUnavailable
from framecast.values import Job, JobKind, JobState, presets
from framecast.values.reasons import ErrorCode, Note

__all__ = [
    "Clock",
    "ErrorCode",
    "Estimate",
    "GuildSettings",
    "IntakeError",
    "IntakeProblem",
    "Job",
    "JobKind",
    "JobState",
    "KeyStatus",
    "Note",
    "Policy",
    "Setting",
    "SettingsError",
    "SettingsProblem",
    "Source",
    "StoreUnavailable",
    "presets",
]
