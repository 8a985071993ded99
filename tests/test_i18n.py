"""Translations: complete catalogues, intact placeholders, fallbacks, and valid slash-command strings."""

from __future__ import annotations

import string
import unicodedata
from typing import Any

import discord
import pytest
from discord.app_commands import (
    TranslationContext,
    TranslationContextLocation,
    TranslationContextTypes,
    locale_str,
)

from cogs.utils import i18n
from cogs.utils.command_i18n import COMMAND_STRINGS, FramecastTranslator
from cogs.utils.i18n import ENGLISH, t
from cogs.utils.translations import TRANSLATIONS

try:  # the exact Discord rule needs \p{sc=Deva}; the `regex` module may not be installed
    import regex
except ImportError:  # pragma: no cover - depends on the environment
    regex = None

LOCALES = ("de", "es-ES", "fr", "pt-BR", "ja", "zh-CN", "zh-TW", "hi", "ru", "ko", "it", "pl", "tr", "uk")

COMMAND_NAMES = ("video", "image", "job", "sync")
OPTION_NAMES = ("prompt", "size", "length", "fps", "model", "id")
NAMES = COMMAND_NAMES + OPTION_NAMES
DESCRIPTIONS = (
    "Generate a short video from a text prompt",
    "Generate an image from a text prompt",
    "Show a job's current state and result",
    "Sync the slash commands (bot owner only)",
    "What the video should show (any language)",
    "What the image should show (any language)",
    "Frame size",
    "Clip length in seconds",
    "Frames per second",
    "Model to use (from the service's list)",
    "The job number",
)
CHOICE_NAMES = (
    "Landscape 3:2 · 1152×768 (default)",
    "Widescreen 16:9 · 1280×720",
    "Portrait 2:3 · 768×1152",
    "Vertical 9:16 · 720×1280",
    "Square 1:1 · 960×960",
    "Small 3:2 · 768×512 (faster)",
    "Square 1:1 · 1024×1024 (default)",
    "Landscape 3:2 · 1152×768",
    "3 seconds",
    "5 seconds (default)",
    "8 seconds",
    "16 fps",
    "24 fps (default)",
    "30 fps",
)

DISCORD_NAME = r"^[-_'\p{L}\p{N}\p{sc=Deva}\p{sc=Thai}]{1,32}$"


def fields(template: str) -> set[str]:
    """The placeholder names used in `template`."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def sample_params(template: str) -> dict[str, object]:
    return {name: f"<{name}>" for name in fields(template)}


def context(location: TranslationContextLocation) -> TranslationContextTypes:
    """A translation context; the translator only looks at the string, so no command is attached."""
    make: Any = TranslationContext  # its overloads want a literal location
    return make(location, None)


def is_valid_name(name: str) -> bool:
    """Discord's rule for command and option names (lower case where the script has case)."""
    if name != name.lower():
        return False
    if regex is not None:
        return regex.match(DISCORD_NAME, name) is not None
    if not 1 <= len(name) <= 32:
        return False
    for char in name:
        if char.isalnum() or char in "-_'":
            continue
        script = unicodedata.name(char, "")
        if script.startswith(("DEVANAGARI", "THAI")):  # vowel signs and viramas are not alnum
            continue
        return False
    return True


# ------------------------------------------------------------------ message catalogues


def test_the_expected_locales_are_translated() -> None:
    assert set(TRANSLATIONS) == set(LOCALES)


@pytest.mark.parametrize("locale", sorted(TRANSLATIONS))
def test_catalogue_has_exactly_the_english_keys(locale: str) -> None:
    catalogue = TRANSLATIONS[locale]
    assert sorted(set(ENGLISH) - set(catalogue)) == [], "missing"
    assert sorted(set(catalogue) - set(ENGLISH)) == [], "unknown"


@pytest.mark.parametrize("locale", sorted(TRANSLATIONS))
def test_placeholders_are_identical(locale: str) -> None:
    wrong = {
        key: (fields(text), fields(ENGLISH[key]))
        for key, text in TRANSLATIONS[locale].items()
        if key in ENGLISH and fields(text) != fields(ENGLISH[key])
    }
    assert wrong == {}


@pytest.mark.parametrize("locale", sorted(TRANSLATIONS))
def test_every_message_formats_in_the_locale(locale: str, caplog: pytest.LogCaptureFixture) -> None:
    for key, english in ENGLISH.items():
        params = sample_params(english)
        text = t(key, locale, **params)
        assert text == TRANSLATIONS[locale][key].format(**params)
        assert text.strip()
        for value in params.values():
            assert str(value) in text, (key, text)
    assert "malformed" not in caplog.text


@pytest.mark.parametrize("locale", sorted(TRANSLATIONS))
def test_emoji_and_job_numbers_are_kept(locale: str) -> None:
    catalogue = TRANSLATIONS[locale]
    for key, english in ENGLISH.items():
        if "#{" in english:
            assert "#{" in catalogue[key], key
        for char in english:
            if unicodedata.category(char) == "So":  # emoji and other symbols
                assert char in catalogue[key], (key, char)


@pytest.mark.parametrize("locale", sorted(TRANSLATIONS))
def test_catalogue_is_actually_translated(locale: str) -> None:
    # Short labels may legitimately coincide with English ("Status", "Video"), but most text must not.
    same = [key for key, text in TRANSLATIONS[locale].items() if text == ENGLISH[key]]
    assert len(same) <= len(ENGLISH) // 10, same


ISSUE_7_KEYS = ("reason_result_refused", "reason_not_media_video", "reason_not_media_image",
                "reason_media_too_large", "error_already_retried", "error_unknown_model_list")


@pytest.mark.parametrize("locale", sorted(TRANSLATIONS))
def test_the_untrusted_service_messages_are_translated(locale: str) -> None:
    # Failure reasons follow "❌ Failed: " (lower case where the script has case), and the
    # "not media" pair must say which kind was expected: two different texts.
    catalogue = TRANSLATIONS[locale]
    for key in ISSUE_7_KEYS:
        text = catalogue[key]
        assert text != ENGLISH[key], key
        if key.startswith("reason_") and text[0].lower() != text[0].upper():
            assert text[0].islower(), (key, text)
    assert catalogue["reason_not_media_video"] != catalogue["reason_not_media_image"]


def test_discord_locale_objects_are_accepted() -> None:
    assert t("button_cancel", discord.Locale.german) == TRANSLATIONS["de"]["button_cancel"]
    assert t("button_cancel", discord.Locale.brazil_portuguese) == TRANSLATIONS["pt-BR"]["button_cancel"]


# ------------------------------------------------------------------ fallbacks


def test_unknown_locale_falls_back_to_english() -> None:
    assert t("error_already_retried", "xx", job=4, id=5) == "Job #4 was already retried as job #5."
    assert t("error_already_retried", None, job=4, id=5) == "Job #4 was already retried as job #5."
    assert t("button_retry", discord.Locale.american_english) == "Retry"


def test_unknown_region_falls_back_to_base_language_or_english(monkeypatch: pytest.MonkeyPatch) -> None:
    # The shipped catalogues are keyed by full codes, so "pt-PT" finds neither "pt-PT" nor "pt".
    assert t("button_retry", "pt-PT") == "Retry"
    # A catalogue for the base language is used for any region of it.
    monkeypatch.setattr(i18n, "_catalogues", lambda: {"pt": {"button_retry": "Tentar novamente"}})
    assert t("button_retry", "pt-PT") == "Tentar novamente"
    assert t("button_cancel", "pt-PT") == "Cancel"  # missing key -> English


def test_broken_translation_falls_back_to_english(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(i18n, "_catalogues", lambda: {"de": {"error_job_not_found": "Auftrag #{nummer}"}})
    assert t("error_job_not_found", "de", id=3) == "There is no job #3 in this server."


def test_unknown_key_is_returned_as_is() -> None:
    assert t("no_such_key", "de") == "no_such_key"


# ------------------------------------------------------------------ slash-command strings


def test_every_command_string_is_covered() -> None:
    assert set(COMMAND_STRINGS) == set(NAMES + DESCRIPTIONS + CHOICE_NAMES)
    for text in DESCRIPTIONS + CHOICE_NAMES:
        assert set(COMMAND_STRINGS[text]) == set(LOCALES), text
    for text in NAMES:
        assert set(COMMAND_STRINGS[text]) <= set(LOCALES), text


@pytest.mark.parametrize("name", NAMES)
def test_names_are_valid_for_discord(name: str) -> None:
    assert is_valid_name(name)
    for locale, translated in COMMAND_STRINGS[name].items():
        assert is_valid_name(translated), (locale, translated)


def test_name_validation_rejects_bad_names() -> None:
    assert not is_valid_name("Video")
    assert not is_valid_name("two words")
    assert not is_valid_name("")
    assert not is_valid_name("x" * 33)
    assert is_valid_name("वीडियो")  # Devanagari vowel signs are allowed


@pytest.mark.parametrize("locale", LOCALES)
def test_names_are_unique_per_locale(locale: str) -> None:
    for group in (COMMAND_NAMES, OPTION_NAMES):
        localized = [COMMAND_STRINGS[name].get(locale, name) for name in group]
        assert len(set(localized)) == len(localized), localized


@pytest.mark.parametrize("text", DESCRIPTIONS + CHOICE_NAMES)
def test_descriptions_and_choice_names_fit(text: str) -> None:
    assert 1 <= len(text) <= 100
    for locale, translated in COMMAND_STRINGS[text].items():
        assert 1 <= len(translated) <= 100, (locale, translated)
        assert translated == translated.strip(), (locale, translated)


def test_choice_names_keep_the_numbers() -> None:
    for text in CHOICE_NAMES:
        digits = "".join(c for c in text if c.isdigit())
        for locale, translated in COMMAND_STRINGS[text].items():
            assert "".join(c for c in translated if c.isdigit()) == digits, (locale, translated)


async def test_translator_translates() -> None:
    translator = FramecastTranslator()
    other = context(TranslationContextLocation.other)
    name = context(TranslationContextLocation.command_name)
    description = context(TranslationContextLocation.command_description)
    choice = context(TranslationContextLocation.choice_name)

    assert await translator.translate(locale_str("image"), discord.Locale.german, name) == "bild"
    assert await translator.translate(locale_str("job"), discord.Locale.japanese, name) == "ジョブ"
    assert (
        await translator.translate(
            locale_str("Generate an image from a text prompt"), discord.Locale.french, description
        )
        == "Génère une image à partir d'un prompt texte"
    )
    assert (
        await translator.translate(locale_str("5 seconds (default)"), discord.Locale.russian, choice)
        == "5 секунд (по умолчанию)"
    )
    assert await translator.translate(locale_str("Frame size"), discord.Locale.spain_spanish, other) == (
        "Tamaño del fotograma"
    )


async def test_translator_returns_none_to_keep_english() -> None:
    translator = FramecastTranslator()
    name = context(TranslationContextLocation.parameter_name)
    # not translated for this locale
    assert await translator.translate(locale_str("fps"), discord.Locale.german, name) is None
    assert await translator.translate(locale_str("video"), discord.Locale.hindi, name) is None
    # a locale Framecast has no translations for
    assert await translator.translate(locale_str("image"), discord.Locale.dutch, name) is None
    assert await translator.translate(locale_str("image"), discord.Locale.american_english, name) is None
    # a string nobody registered
    assert await translator.translate(locale_str("unheard of"), discord.Locale.german, name) is None
    # identical to English (the choice is "16 fps" in German too)
    choice = context(TranslationContextLocation.choice_name)
    assert await translator.translate(locale_str("16 fps"), discord.Locale.german, choice) is None
