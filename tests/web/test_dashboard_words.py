"""The dashboard's words for the outcomes it maps through a table (web/dashboard.py: KEY_WORDS).

Each is a message of the bot's catalogue, the one /settings key replies with, so a new outcome
without words fails here rather than as an outage page (a KeyError answered 503).
"""

from __future__ import annotations

from cogs.i18n import SOURCE, shipped, t
from framecast.app import KeySetResult
from web.dashboard import KEY_WORDS


def test_every_key_outcome_but_saved_has_the_words_settings_key_gives_it() -> None:
    # SAVED redirects to the dashboard with `done`; every other outcome is worded in place.
    assert set(KEY_WORDS) == set(KeySetResult) - {KeySetResult.SAVED}
    for result, key in KEY_WORDS.items():
        assert key == f"settings_key_{result.value}" or result is KeySetResult.THROTTLED, result
        assert key in shipped().english.messages, key


def test_each_key_outcome_reads_in_every_language_with_what_the_dashboard_gives() -> None:
    params = {"last4": "abcd", "max": 5, "when": "in 42 minutes"}
    for code in shipped().by_locale:
        for key in KEY_WORDS.values():
            text = t(key, code, **params)
            assert text != key and "{" not in text, (code, key)
    # The words /settings key gives (cogs/server_key.py), not a second wording of the same outcome.
    assert KEY_WORDS[KeySetResult.THROTTLED] == "settings_key_checks_throttled"
    throttled = t(KEY_WORDS[KeySetResult.THROTTLED], SOURCE, **params)
    assert "5 per hour" in throttled and "in 42 minutes" in throttled
