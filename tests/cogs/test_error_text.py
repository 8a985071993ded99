"""The words of every refusal and expected error (cogs/error_text.py): which error gets which localised reply."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from discord import app_commands

from cogs.error_text import (
    ADMIN_REFUSAL_KEYS,
    DAILY_QUOTA_KEYS,
    INTAKE_KEYS,
    REFUSAL_KEYS,
    SERVICE_ERROR_KEYS,
    SETTING_NAME_KEYS,
    SETTINGS_KEYS,
    STYLE_KEYS,
    STYLE_KIND_KEYS,
    MissingChannelPermissions,
    error_message,
)
from cogs.i18n import SOURCE, shipped, t
from framecast.app import (
    Actor,
    AdminRefusal,
    AdminRefused,
    ErrorCode,
    IntakeError,
    IntakeProblem,
    JobKind,
    JobRefused,
    Refusal,
    ServiceError,
    Setting,
    SettingsError,
    SettingsProblem,
    StyleError,
    StyleProblem,
)
from framecast.service.errors import AuthError

P = IntakeProblem
# Every IntakeError the core raises, with the parameters it gives, and the message it reads as.
INTAKE_ERRORS: list[tuple[IntakeProblem, dict[str, Any], str]] = [
    (P.PROMPT_EMPTY, {}, "error_prompt_empty"),
    (P.PROMPT_TOO_LONG, {"max": 2000, "length": 2345}, "error_prompt_too_long"),
    (P.BAD_OPTION, {"option": "size"}, "error_bad_option"),
    (P.MEMBER_LIMIT, {"limit": 2}, "error_member_limit"),
    (P.GUILD_QUEUE_FULL, {"cap": 25}, "error_guild_queue_full"),
    (P.ALREADY_RETRIED, {"job": 4, "id": 9}, "error_already_retried"),
    (P.UNKNOWN_MODEL, {"model": "svc-video-v9"}, "error_unknown_model"),
    (
        P.UNLISTED_MODEL,
        {"model": "svc-video-v9", "models": "svc-video-v2.0, svc-video-v2.1"},
        "error_unknown_model_list",
    ),
    (P.NSFW_ONLY, {}, "settings_refuse_nsfw"),
    (P.PROMPT_BLOCKED, {}, "settings_refuse_blocked"),
    (P.GUILD_KEY_REJECTED, {}, "settings_refuse_key_rejected"),
    (P.GUILD_KEY_UNREADABLE, {}, "settings_refuse_key_unreadable"),
    (P.UNKNOWN_STYLE, {"style": "Noir"}, "style_error_unknown"),
    (P.STYLED_PROMPT_TOO_LONG, {"style": "Noir", "max": 2000, "length": 2010}, "style_error_prompt_too_long"),
]
#: Problems whose parameters are shaped for Discord (channel mentions, a relative timestamp, a kind).
SHAPED_PROBLEMS = {P.CHANNEL_NOT_ALLOWED, P.DAILY_QUOTA, P.STYLE_WRONG_KIND}
LOCALES = ["en-US", "de", "es-ES", "fr"]


def english_keys() -> frozenset[str]:
    """Every message key of the source (en-US) catalogue."""
    return frozenset(shipped().by_locale[SOURCE].messages)


def wrapped(error: Exception) -> app_commands.CommandInvokeError:
    """`error` as discord.py hands it to the tree's on_error after a command raised it."""
    command: Any = SimpleNamespace(name="video")  # discord.py reads only the name, for its message
    try:
        raise app_commands.CommandInvokeError(command, error) from error
    except app_commands.CommandInvokeError as exc:
        return exc


def test_every_intake_problem_has_exactly_one_message() -> None:
    assert (
        set(INTAKE_KEYS)
        == set(IntakeProblem)
        == {problem for problem, _, _ in INTAKE_ERRORS} | SHAPED_PROBLEMS
    )
    assert set(INTAKE_KEYS.values()) <= english_keys()


@pytest.mark.parametrize("locale", LOCALES)
@pytest.mark.parametrize(("problem", "params", "key"), INTAKE_ERRORS)
def test_every_intake_error_gets_its_localised_message(
    problem: IntakeProblem, params: dict[str, Any], key: str, locale: str
) -> None:
    assert key in english_keys()
    text = error_message(IntakeError(problem, **params), locale)
    assert text == t(key, locale, **params)
    assert text and text != key
    # The same when discord.py wrapped it (raised inside the command callback).
    assert error_message(wrapped(IntakeError(problem, **params)), locale) == text


def test_intake_parameters_are_shown_literally() -> None:
    text = error_message(IntakeError(P.UNKNOWN_MODEL, model="**bold** @everyone"), "en-US")
    assert text is not None
    assert "\\*\\*bold\\*\\*" in text and "\\@everyone" in text


@pytest.mark.parametrize("locale", LOCALES)
def test_a_style_of_the_other_kind_names_what_it_is_for(locale: str) -> None:
    for asked, key in (
        (JobKind.VIDEO, "style_error_not_for_video"),
        (JobKind.IMAGE, "style_error_not_for_image"),
    ):
        text = error_message(IntakeError(P.STYLE_WRONG_KIND, style="*Noir*", kind=asked), locale)
        assert text == t(key, locale, style="\\*Noir\\*")


STYLE_ERRORS: list[tuple[StyleError, str]] = [
    (StyleError(StyleProblem.BAD_NAME, max=32), "1 to 32 characters"),
    (StyleError(StyleProblem.NAME_TAKEN, name="<@1> Noir"), "already has a style called “\\<\\@1> Noir”"),
    (StyleError(StyleProblem.NO_PLACEHOLDER), "must contain {prompt} where"),
    (StyleError(StyleProblem.TEMPLATE_TOO_LONG, max=1000, length=1001), "(1001 characters; at most 1000)"),
    (StyleError(StyleProblem.TOO_MANY, max=25), "already has 25 styles"),
    (StyleError(StyleProblem.NOT_FOUND, name="__x__"), "no style called “\\_\\_x\\_\\_”"),
]


def test_every_style_problem_has_a_message_with_what_the_admin_typed_shown_literally() -> None:
    assert set(STYLE_KEYS) == set(StyleProblem) == {e.problem for e, _ in STYLE_ERRORS}
    assert set(STYLE_KEYS.values()) | set(STYLE_KIND_KEYS.values()) <= english_keys()
    for error, shown in STYLE_ERRORS:
        text = error_message(error, "en-US")
        assert text is not None and shown in text, (error.problem, text)
        for locale in LOCALES[1:]:
            translated = error_message(error, locale)
            assert translated and translated != text and "{" not in translated.replace("{prompt}", "")


def test_missing_channel_permissions_are_named() -> None:
    text = error_message(MissingChannelPermissions(["attach_files", "embed_links"]), "en-US")
    assert text == t("error_missing_permissions", "en-US", perms="Attach Files, Embed Links")


@pytest.mark.parametrize("locale", LOCALES)
def test_discord_check_failures(locale: str) -> None:
    assert error_message(app_commands.NoPrivateMessage(), locale) == t("error_guild_only", locale)
    assert error_message(app_commands.MissingPermissions(["manage_guild"]), locale) == t(
        "error_not_allowed", locale
    )
    cooldown = app_commands.CommandOnCooldown(app_commands.Cooldown(1, 10.0), 4.4)
    assert error_message(cooldown, locale) == t("error_cooldown", locale, seconds=4)
    quick = app_commands.CommandOnCooldown(app_commands.Cooldown(1, 10.0), 0.2)
    assert error_message(quick, locale) == t("error_cooldown", locale, seconds=1)


@pytest.mark.parametrize("locale", LOCALES)
def test_a_rejected_api_key_says_the_bot_is_misconfigured(locale: str) -> None:
    assert error_message(AuthError(), locale) == t("error_misconfigured", locale)
    assert error_message(wrapped(AuthError()), locale) == t("error_misconfigured", locale)


def test_service_error_keys_are_real_messages() -> None:
    assert set(SERVICE_ERROR_KEYS) <= set(ErrorCode)
    for key in SERVICE_ERROR_KEYS.values():
        assert key in english_keys()


@pytest.mark.parametrize("code", [c for c in ErrorCode if c not in SERVICE_ERROR_KEYS])
def test_other_service_errors_are_bugs_here(code: ErrorCode) -> None:
    # A command meets the service only through the model list: anything but a bad key is unexpected.
    error = type("SomeServiceError", (ServiceError,), {"code": code})()
    assert error_message(error, "en-US") is None


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyError("x"), wrapped(ValueError("bad"))])
def test_unexpected_errors_give_none(error: Exception) -> None:
    # None: the tree logs the traceback and replies with the generic apology.
    assert error_message(error, "en-US") is None
    assert "error_generic" in english_keys()


@pytest.mark.parametrize("locale", LOCALES)
def test_allowed_channels_are_channel_mentions(locale: str) -> None:
    text = error_message(IntakeError(P.CHANNEL_NOT_ALLOWED, channels=[111, 222]), locale)
    assert text == t("settings_refuse_channel", locale, channels="<#111>, <#222>")
    assert error_message(wrapped(IntakeError(P.CHANNEL_NOT_ALLOWED, channels=[111])), locale) == t(
        "settings_refuse_channel", locale, channels="<#111>"
    )


@pytest.mark.parametrize("locale", [*LOCALES, "ru", "pl", "ja"])
@pytest.mark.parametrize("kind", list(JobKind))
def test_daily_quota_names_the_kind_the_limit_and_a_relative_reset(kind: JobKind, locale: str) -> None:
    text = error_message(IntakeError(P.DAILY_QUOTA, kind=kind, limit=3, resets_at=1_700_000_123.7), locale)
    assert text == t(DAILY_QUOTA_KEYS[kind], locale, limit=3, resets="<t:1700000123:R>")
    assert text is not None and "3" in text and "<t:1700000123:R>" in text
    # The kind may come back from the store as its string value.
    assert error_message(IntakeError(P.DAILY_QUOTA, kind=kind.value, limit=3, resets_at=1.0e9), locale)
    other = next(k for k in JobKind if k is not kind)
    assert text != error_message(
        IntakeError(P.DAILY_QUOTA, kind=other, limit=3, resets_at=1_700_000_123.7), locale
    )


@pytest.mark.parametrize("locale", [*LOCALES, "ru", "pl", "ja"])
def test_a_members_own_limit_met_by_someone_acting_for_them_names_the_member(locale: str) -> None:
    # A server manager's Retry of a member's job: the limit is the member's, named by a mention
    # (which shows their name; replies never ping), never "you".
    for limit in (1, 2, 5):
        text = error_message(IntakeError(P.MEMBER_LIMIT, limit=limit, member=1234), locale)
        assert text == t("error_member_limit_member", locale, limit=limit, member="<@1234>")
        assert text != error_message(IntakeError(P.MEMBER_LIMIT, limit=limit), locale)
    for kind, key in DAILY_QUOTA_KEYS.items():
        quota = IntakeError(P.DAILY_QUOTA, kind=kind, limit=3, resets_at=1_700_000_123.7, member=1234)
        text = error_message(quota, locale)
        assert text == t(f"{key}_member", locale, limit=3, resets="<t:1700000123:R>", member="<@1234>")
        assert text is not None and "<@1234>" in text and "<t:1700000123:R>" in text


def test_a_members_own_limit_in_english_says_whose_it_is() -> None:
    text = error_message(IntakeError(P.MEMBER_LIMIT, limit=2, member=1234), SOURCE)
    assert text == "<@1234> already has 2 jobs queued or running. Wait for one to finish, or cancel one."
    quota = IntakeError(P.DAILY_QUOTA, kind=JobKind.IMAGE, limit=1, resets_at=1.0e9, member=1234)
    assert error_message(quota, SOURCE) == (
        "<@1234> has reached this server's daily limit of 1 image. It resets <t:1000000000:R>."
    )


def test_a_blocked_prompt_never_echoes_the_term() -> None:
    for locale in LOCALES:
        text = error_message(IntakeError(P.PROMPT_BLOCKED), locale)
        assert text == t("settings_refuse_blocked", locale)
        assert "{" not in (text or "")


def test_every_settings_problem_and_setting_has_a_message() -> None:
    assert set(SETTINGS_KEYS) == set(SettingsProblem)
    assert set(SETTING_NAME_KEYS) == set(Setting)
    assert set(SETTINGS_KEYS.values()) | set(SETTING_NAME_KEYS.values()) | set(DAILY_QUOTA_KEYS.values()) <= (
        english_keys()
    )


SETTINGS_ERRORS: list[tuple[SettingsError, str, dict[str, Any]]] = [
    (
        SettingsError(SettingsProblem.ABOVE_CEILING, setting=Setting.MEMBER_JOBS, ceiling=3),
        "settings_error_above_ceiling",
        {"ceiling": 3},
    ),
    (
        SettingsError(SettingsProblem.BAD_VALUE, setting="video_size"),
        "settings_error_bad_value",
        {},
    ),
    (SettingsError(SettingsProblem.TOO_MANY_TERMS, max=200), "settings_error_too_many_terms", {"max": 200}),
    (SettingsError(SettingsProblem.TERM_TOO_LONG, max=100), "settings_error_term_too_long", {"max": 100}),
    (
        SettingsError(SettingsProblem.TOO_MANY_CHANNELS, max=50),
        "settings_error_too_many_channels",
        {"max": 50},
    ),
]


@pytest.mark.parametrize("locale", LOCALES)
@pytest.mark.parametrize(("error", "key", "params"), SETTINGS_ERRORS)
def test_settings_errors_name_the_setting_in_the_admins_language(
    error: SettingsError, key: str, params: dict[str, Any], locale: str
) -> None:
    setting = error.params.get("setting")
    if setting is not None:
        params = {**params, "setting": t(SETTING_NAME_KEYS[Setting(setting)], locale)}
    text = error_message(error, locale)
    assert text == t(key, locale, **params)
    assert text and text != key and "member_jobs" not in text and "video_size" not in text
    assert error_message(wrapped(error), locale) == text


@pytest.mark.parametrize("locale", LOCALES)
def test_a_member_without_manage_server_is_told_so(locale: str) -> None:
    refused = AdminRefused(AdminRefusal.NOT_MANAGER, Actor(1, 2))
    assert error_message(refused, locale) == t("settings_error_not_manager", locale)
    assert t("settings_error_not_manager", locale) != t("error_not_allowed", locale)
    # A person's own queue (a user install outside a server) has no settings: servers only.
    outside = AdminRefused(AdminRefusal.NO_SERVER, Actor(1, 1, manages_guild=True))
    assert error_message(outside, locale) == t("userinstall_server_only", locale)


def test_every_admin_refusal_has_its_words() -> None:
    assert set(ADMIN_REFUSAL_KEYS) == set(AdminRefusal)


def test_every_refused_action_on_a_job_has_exactly_one_message_naming_the_job() -> None:
    assert set(REFUSAL_KEYS) == set(Refusal)
    assert set(REFUSAL_KEYS.values()) <= english_keys()
    assert error_message(JobRefused(Refusal.NOT_FOUND, 42), "en-US") == t(
        "error_job_not_found", "en-US", id=42
    )
    assert error_message(JobRefused(Refusal.TOO_LATE_TO_CANCEL, 42), "de") == t(
        "error_too_late_cancel", "de", id=42
    )
    assert error_message(wrapped(JobRefused(Refusal.NOT_ALLOWED, 42)), "fr") == t("error_not_allowed", "fr")
