"""Translations: the JSON catalogues, plural forms, the one locale resolver, and slash-command strings."""

from __future__ import annotations

import ast
import asyncio
import json
import logging
import string
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import babel
import discord
import pytest
from discord import app_commands
from discord.app_commands import (
    TranslationContext,
    TranslationContextLocation,
    TranslationContextTypes,
    locale_str,
)
from discord.ext import commands

from cogs.error_text import error_message
from cogs.i18n import (
    LOCALES_DIR,
    SOURCE,
    Catalogue,
    CatalogueError,
    Catalogues,
    FramecastTranslator,
    Plural,
    candidates,
    shipped,
    t,
)
from cogs.i18n.personal import PERSONAL_KEYS, place_key
from framecast.app import IntakeError, IntakeProblem, JobRefused, Refusal

try:  # the exact Discord rule needs \p{sc=Deva}; the `regex` module may not be installed
    import regex
except ImportError:  # pragma: no cover - depends on the environment
    regex = None

LOCALES = ("de", "es-ES", "fr", "pt-BR", "ja", "zh-CN", "zh-TW", "hi", "ru", "ko", "it", "pl", "tr", "uk")
DISCORD_LOCALES = tuple(locale.value for locale in discord.Locale)


def _command_strings() -> tuple[dict[str, str], list[list[str]]]:
    """Every string the real cogs hand Discord's translator, with its kind, and the sibling groups.

    Read from the cog classes themselves (no bot, no network): each command's payload is built
    through a translator that records what it is asked. Siblings (top-level commands; the options
    or subcommands of one command or group) must keep distinct names in every locale.
    """
    import cogs.admin
    import cogs.generate
    import cogs.history
    import cogs.info
    import cogs.jobs
    import cogs.queue
    import cogs.server_key
    import cogs.settings
    import cogs.styles

    seen: dict[str, str] = {}

    class Recorder(app_commands.Translator):
        async def translate(
            self, string: locale_str, locale: discord.Locale, context: app_commands.TranslationContextTypes
        ) -> str | None:
            seen.setdefault(string.message, context.location.name)
            return None

    groups: list[list[str]] = []

    def siblings(payload: dict[str, Any]) -> None:
        children = [c for c in payload.get("options", []) if isinstance(c, dict)]
        if children:
            groups.append([str(c["name"]) for c in children])
            for child in children:
                siblings(child)

    async def collect() -> None:
        recorder = Recorder()
        tree: app_commands.CommandTree[discord.Client] = app_commands.CommandTree(
            discord.Client(intents=discord.Intents.none())
        )
        await tree.set_translator(recorder)
        top: list[str] = []
        for module in (
            cogs.generate,
            cogs.jobs,
            cogs.admin,
            cogs.settings,
            cogs.queue,
            cogs.info,
            cogs.history,
        ):
            for cls in vars(module).values():
                if (
                    isinstance(cls, type)
                    and issubclass(cls, commands.Cog)
                    and cls.__module__ == module.__name__
                ):
                    # Cog.__new__ builds the cog's commands (and a GroupCog's group) without __init__.
                    cog = cls.__new__(cls)
                    group = cog.__cog_app_commands_group__
                    if module is cogs.settings and group is not None:
                        # Attached as the bot does (the settings extension's setup, then cogs.styles).
                        group.add_command(cogs.server_key.KeyGroup())
                        group.add_command(cogs.styles.StylesGroup())
                    found = [group] if group is not None else cog.__cog_app_commands__
                    for command in found:
                        payload = await command.get_translated_payload(tree, recorder)
                        top.append(str(payload["name"]))
                        siblings(payload)
        groups.append(top)

    asyncio.run(collect())
    return seen, groups


_STRINGS, SIBLINGS = _command_strings()
_NAME_KINDS = {"command_name", "group_name", "parameter_name"}
NAMES = tuple(text for text, kind in _STRINGS.items() if kind in _NAME_KINDS)
DESCRIPTIONS = tuple(text for text, kind in _STRINGS.items() if kind.endswith("description"))
CHOICE_NAMES = tuple(text for text, kind in _STRINGS.items() if kind == "choice_name")

# Messages with a count, and the placeholder that holds it: real plural forms wherever the
# language has them. English keeps "within {minutes} minutes" for now (test_render pins the text).
COUNTED = {
    "error_prompt_too_long": "length",
    "error_member_limit": "limit",
    "error_member_limit_member": "limit",
    "error_guild_queue_full": "cap",
    "error_cooldown": "seconds",
    "info_synced": "count",
    "reason_timeout": "minutes",
    "left_minutes": "minutes",
    "left_hours": "hours",
    "starts_minutes": "minutes",
    "starts_hours": "hours",
}
NOT_PLURAL_YET = {(SOURCE, "reason_timeout")}

DISCORD_NAME = r"^[-_'\p{L}\p{N}\p{sc=Deva}\p{sc=Thai}]{1,32}$"


def raw(locale: str) -> dict[str, Any]:
    """A catalogue file as translators see it."""
    data: dict[str, Any] = json.loads((LOCALES_DIR / f"{locale}.json").read_text(encoding="utf-8"))
    return data


ENGLISH: dict[str, Any] = raw(SOURCE)["messages"]
ENGLISH_COMMANDS: dict[str, str] = raw(SOURCE)["commands"]


def texts(message: str | dict[str, str]) -> list[str]:
    """Every text of a message (each plural form, without the "plural" marker)."""
    if isinstance(message, str):
        return [message]
    return [text for category, text in message.items() if category != "plural"]


def fields(template: str) -> set[str]:
    """The placeholder names used in `template`."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def placeholders(message: str | dict[str, str]) -> set[str]:
    return set().union(*(fields(text) for text in texts(message)))


def sample_params(message: str | dict[str, str]) -> dict[str, object]:
    return {name: f"<{name}>" for name in placeholders(message)}


def plural_tags(locale: str) -> set[str]:
    """The CLDR categories of `locale` besides "other" (empty: the language has no plural forms)."""
    return set(babel.Locale.parse(locale, sep="-").plural_form.tags)


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


# ------------------------------------------------------------------ the files


def test_the_expected_locales_are_translated() -> None:
    assert {path.stem for path in LOCALES_DIR.glob("*.json")} == {SOURCE, *LOCALES}
    assert set(shipped().by_locale) == {SOURCE, *LOCALES}


@pytest.mark.parametrize("locale", (SOURCE, *LOCALES))
def test_each_file_is_a_clean_catalogue_for_a_discord_locale(locale: str) -> None:
    assert locale in DISCORD_LOCALES
    data = raw(locale)
    assert set(data) == {"messages", "commands"}
    assert Catalogue.from_file(LOCALES_DIR / f"{locale}.json").problems == ()


def test_nothing_is_read_at_import_time() -> None:
    code = "import cogs.i18n; print(cogs.i18n.shipped.cache_info().currsize)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.stdout.strip() == "0"


def test_the_translators_readme_is_there() -> None:
    readme = (LOCALES_DIR / "README.md").read_text(encoding="utf-8")
    assert "plural" in readme and "{placeholders}" in readme


# ------------------------------------------------------------------ message catalogues


@pytest.mark.parametrize("locale", LOCALES)
def test_catalogue_has_exactly_the_english_keys(locale: str) -> None:
    catalogue = raw(locale)["messages"]
    assert sorted(set(ENGLISH) - set(catalogue)) == [], "missing"
    assert sorted(set(catalogue) - set(ENGLISH)) == [], "unknown"


@pytest.mark.parametrize("locale", (SOURCE, *LOCALES))
def test_placeholders_are_identical(locale: str) -> None:
    wrong = {
        key: [(fields(text), placeholders(ENGLISH[key])) for text in texts(message)]
        for key, message in raw(locale)["messages"].items()
        if any(fields(text) != placeholders(ENGLISH[key]) for text in texts(message))
    }
    assert wrong == {}  # every plural form keeps every placeholder, the number included


@pytest.mark.parametrize("locale", (SOURCE, *LOCALES))
def test_plural_messages_have_the_languages_forms(locale: str) -> None:
    tags = plural_tags(locale)
    for key, message in raw(locale)["messages"].items():
        if isinstance(message, str):
            continue
        forms = set(message) - {"plural"}
        assert forms == tags | {"other"}, (key, sorted(forms), sorted(tags))
        assert message["plural"] in placeholders(ENGLISH[key]), key
        if isinstance(ENGLISH[key], dict):
            assert message["plural"] == ENGLISH[key]["plural"], key


@pytest.mark.parametrize("locale", (SOURCE, *LOCALES))
def test_counts_use_real_plural_forms(locale: str) -> None:
    messages = raw(locale)["messages"]
    for key, param in COUNTED.items():
        if not plural_tags(locale):  # ja, ko, zh: one text for every number
            assert isinstance(messages[key], str), key
        elif (locale, key) not in NOT_PLURAL_YET:
            assert isinstance(messages[key], dict) and messages[key]["plural"] == param, key


@pytest.mark.parametrize("locale", (SOURCE, *LOCALES))
def test_every_message_formats_in_the_locale(locale: str, caplog: pytest.LogCaptureFixture) -> None:
    catalogue = raw(locale)["messages"]
    for key, english in ENGLISH.items():
        params = sample_params(english)
        text = t(key, locale, **params)
        assert text in [form.format(**params) for form in texts(catalogue[key])]
        assert text.strip()
        for value in params.values():
            assert str(value) in text, (key, text)
    for key, param in COUNTED.items():
        for n in (0, 1, 2, 3, 5, 11, 21, 22, 1.5, 1_000_000):
            params = {**sample_params(ENGLISH[key]), param: n}
            assert str(n) in t(key, locale, **params)
    assert "malformed" not in caplog.text


@pytest.mark.parametrize("locale", LOCALES)
def test_emoji_and_job_numbers_are_kept(locale: str) -> None:
    catalogue = raw(locale)["messages"]
    for key, english in ENGLISH.items():
        source = " ".join(texts(english))
        for text in texts(catalogue[key]):
            if "#{" in source:
                assert "#{" in text, key
            for char in source:
                if unicodedata.category(char) == "So":  # emoji and other symbols
                    assert char in text, (key, char)


@pytest.mark.parametrize("locale", LOCALES)
def test_catalogue_is_actually_translated(locale: str) -> None:
    # Short labels may legitimately coincide with English ("Status", "Video"), but most text must not.
    same = [key for key, message in raw(locale)["messages"].items() if message == ENGLISH[key]]
    assert len(same) <= len(ENGLISH) // 10, same


ISSUE_7_KEYS = (
    "reason_result_refused",
    "reason_not_media_video",
    "reason_not_media_image",
    "reason_media_too_large",
    "error_already_retried",
    "error_unknown_model_list",
)


@pytest.mark.parametrize("locale", LOCALES)
def test_the_untrusted_service_messages_are_translated(locale: str) -> None:
    # Failure reasons follow "❌ Failed: " (lower case where the script has case), and the
    # "not media" pair must say which kind was expected: two different texts.
    catalogue = raw(locale)["messages"]
    for key in ISSUE_7_KEYS:
        text = catalogue[key]
        assert text != ENGLISH[key], key
        if key.startswith("reason_") and text[0].lower() != text[0].upper():
            assert text[0].islower(), (key, text)
    assert catalogue["reason_not_media_video"] != catalogue["reason_not_media_image"]


def test_discord_locale_objects_are_accepted() -> None:
    assert t("button_cancel", discord.Locale.german) == raw("de")["messages"]["button_cancel"]
    assert t("button_cancel", discord.Locale.brazil_portuguese) == raw("pt-BR")["messages"]["button_cancel"]


# ------------------------------------------------------------------ plural forms


def test_english_plurals() -> None:
    assert t("info_synced", "en-US", count=1) == "Synced 1 command."
    assert t("info_synced", "en-US", count=0) == "Synced 0 commands."
    assert t("info_synced", "en-US", count=4) == "Synced 4 commands."
    assert t("error_cooldown", None, seconds=1) == "Slow down a little: try again in 1 second."
    assert t("error_guild_queue_full", None, cap=3) == (
        "This server's queue is full (3 jobs waiting). Please try again later."
    )


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (1, "1 секунду"),
        (2, "2 секунды"),
        (4, "4 секунды"),
        (5, "5 секунд"),
        (11, "11 секунд"),
        (21, "21 секунду"),
        (22, "22 секунды"),
        (25, "25 секунд"),
        (1.5, "1.5 секунды"),
    ],
)
def test_russian_plurals(n: float, text: str) -> None:
    assert t("error_cooldown", "ru", seconds=n) == f"Не так быстро: попробуйте снова через {text}."


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (1, "1 polecenie"),
        (2, "2 polecenia"),
        (5, "5 poleceń"),
        (12, "12 poleceń"),
        (21, "21 poleceń"),
        (22, "22 polecenia"),
        (0, "0 poleceń"),
    ],
)
def test_polish_plurals(n: int, text: str) -> None:
    # Unlike Russian, Polish "one" is 1 alone: 21 takes the "many" form.
    assert t("info_synced", "pl", count=n) == f"Zsynchronizowano {text}."


def test_ukrainian_plurals() -> None:
    assert t("info_synced", "uk", count=1) == "Синхронізовано 1 команду."
    assert t("info_synced", "uk", count=3) == "Синхронізовано 3 команди."
    assert t("info_synced", "uk", count=5) == "Синхронізовано 5 команд."
    assert t("info_synced", "uk", count=21) == "Синхронізовано 21 команду."


def test_french_zero_and_one_are_singular_and_millions_take_de() -> None:
    assert t("info_synced", "fr", count=0) == "0 commande synchronisée."
    assert t("info_synced", "fr", count=1) == "1 commande synchronisée."
    assert t("info_synced", "fr", count=2) == "2 commandes synchronisées."
    assert t("info_synced", "fr", count=1_000_000) == "1000000 de commandes synchronisées."


@pytest.mark.parametrize(
    ("n", "left", "starts"),
    [
        (1, "около 1 минуты", "через 1 минуту"),
        (2, "около 2 минут", "через 2 минуты"),
        (5, "около 5 минут", "через 5 минут"),
        (21, "около 21 минуты", "через 21 минуту"),
        (25, "около 25 минут", "через 25 минут"),
    ],
)
def test_russian_time_ahead_agrees_with_the_number(n: int, left: str, starts: str) -> None:
    # "около" takes the genitive, "через" the accusative: each its own forms.
    assert t("left_minutes", "ru", minutes=n) == f"осталось {left}"
    assert t("starts_minutes", "ru", minutes=n) == f"начнётся примерно {starts}"


@pytest.mark.parametrize(
    ("n", "left", "starts"),
    [
        (1, "około 1 minuty", "za mniej więcej 1 minutę"),
        (2, "około 2 minut", "za mniej więcej 2 minuty"),
        (5, "około 5 minut", "za mniej więcej 5 minut"),
        (22, "około 22 minut", "za mniej więcej 22 minuty"),
        (25, "około 25 minut", "za mniej więcej 25 minut"),
    ],
)
def test_polish_time_ahead_agrees_with_the_number(n: int, left: str, starts: str) -> None:
    assert t("left_minutes", "pl", minutes=n) == f"pozostało {left}"
    assert t("starts_minutes", "pl", minutes=n) == f"zacznie się {starts}"
    assert t("left_hours", "pl", hours=2) == "pozostało około 2 godzin"


def test_english_time_ahead() -> None:
    assert t("left_minutes", "en-US", minutes=1) == "about 1 minute left"
    assert t("left_minutes", "en-US", minutes=4) == "about 4 minutes left"
    assert t("starts_hours", "en-US", hours=1) == "starts in about 1 hour"
    assert t("starts_hours", "en-US", hours=2) == "starts in about 2 hours"


@pytest.mark.parametrize("locale", ["ja", "zh-CN", "zh-TW", "ko"])
def test_languages_without_plural_forms_use_one_text(locale: str) -> None:
    one, two = t("info_synced", locale, count=1), t("info_synced", locale, count=2)
    assert one.replace("1", "2") == two
    assert t("info_synced", "ja", count=5) == "5 件のコマンドを同期しました。"
    for key, param in (("left_minutes", "minutes"), ("starts_hours", "hours")):
        assert t(key, locale, **{param: 1}).replace("1", "2") == t(key, locale, **{param: 2})
    assert t("left_minutes", "ja", minutes=3) == "残り約 3 分"


def test_a_plural_without_a_number_takes_the_other_form() -> None:
    assert t("info_synced", "ru", count="много") == "Синхронизировано много команды."
    assert t("info_synced", "en-US", count=True) == "Synced True commands."


def test_a_missing_form_falls_back_to_other() -> None:
    catalogues = Catalogues.from_data(
        {
            SOURCE: {"messages": {"n": {"plural": "n", "one": "{n} thing", "other": "{n} things"}}},
            "ru": {"messages": {"n": {"plural": "n", "one": "{n} штука", "other": "{n} штуки"}}},
        }
    )
    assert catalogues.message("n", "ru", {"n": 21}) == "21 штука"
    assert catalogues.message("n", "ru", {"n": 5}) == "5 штуки"  # "many" is missing
    assert catalogues.message("n", "de", {"n": 1}) == "1 thing"


# ------------------------------------------------------------------ the locale resolver


def test_candidates() -> None:
    assert candidates("es-419") == ("es-419", "es-ES", "es", SOURCE)
    assert candidates("pt-BR") == ("pt-BR", "pt", SOURCE)
    assert candidates(discord.Locale.german) == ("de", SOURCE)
    assert candidates(None) == candidates("") == (SOURCE, "en")
    assert candidates("en-GB") == ("en-GB", "en", SOURCE)


async def test_latin_american_spanish_reads_spanish_everywhere() -> None:
    latam = discord.Locale.latin_american_spanish
    assert t("button_retry", latam) == t("button_retry", "es-ES") == "Reintentar"
    assert t("error_cooldown", latam, seconds=2) == "Más despacio: inténtalo de nuevo dentro de 2 segundos."
    translator = FramecastTranslator()
    name = context(TranslationContextLocation.command_name)
    assert await translator.translate(locale_str("image"), latam, name) == "imagen"
    assert await translator.translate(locale_str("job"), latam, name) == "tarea"
    choice = context(TranslationContextLocation.choice_name)
    assert await translator.translate(locale_str("3 seconds"), latam, choice) == "3 segundos"
    # a name Spain leaves in English stays English for Latin America too
    option = context(TranslationContextLocation.parameter_name)
    assert await translator.translate(locale_str("prompt"), latam, option) is None


async def test_brazilian_portuguese() -> None:
    assert t("button_cancel", "pt-BR") == "Cancelar"
    translator = FramecastTranslator()
    name = context(TranslationContextLocation.command_name)
    assert await translator.translate(locale_str("image"), discord.Locale.brazil_portuguese, name) == "imagem"


async def test_unknown_locale_is_english_for_replies_and_commands() -> None:
    assert t("error_already_retried", "xx", job=4, id=5) == "Job #4 was already retried as job #5."
    assert t("error_already_retried", None, job=4, id=5) == "Job #4 was already retried as job #5."
    assert t("button_retry", discord.Locale.american_english) == "Retry"
    assert t("button_retry", discord.Locale.british_english) == "Retry"
    name = context(TranslationContextLocation.command_name)
    assert await FramecastTranslator().translate(locale_str("image"), discord.Locale.dutch, name) is None


def test_unknown_region_falls_back_to_base_language_or_english() -> None:
    # The shipped catalogues are keyed by full codes, so "pt-PT" finds neither "pt-PT" nor "pt".
    assert t("button_retry", "pt-PT") == "Retry"
    # A catalogue for the base language is used for any region of it.
    catalogues = Catalogues.from_data(
        {
            SOURCE: raw(SOURCE),
            "pt": {"messages": {"button_retry": "Tentar novamente"}, "commands": {"image": "imagem"}},
        }
    )
    assert catalogues.message("button_retry", "pt-PT", {}) == "Tentar novamente"
    assert catalogues.message("button_cancel", "pt-PT", {}) == "Cancel"  # missing key -> English
    assert catalogues.command("image", "pt-PT") == "imagem"
    assert catalogues.command("video", "pt-PT") is None


# ------------------------------------------------------------------ nothing breaks a reply


def test_broken_translation_falls_back_to_english(caplog: pytest.LogCaptureFixture) -> None:
    catalogues = Catalogues.from_data(
        {
            SOURCE: raw(SOURCE),
            "de": {
                "messages": {
                    "error_job_not_found": "Auftrag #{nummer}",
                    "info_synced": {
                        "plural": "count",
                        "one": "{count} Befehl",
                        "other": "{count} Befehle {x}",
                    },
                }
            },
        }
    )
    assert catalogues.message("error_job_not_found", "de", {"id": 3}) == "There is no job #3 in this server."
    assert catalogues.message("info_synced", "de", {"count": 1}) == "1 Befehl"
    assert catalogues.message("info_synced", "de", {"count": 2}) == "Synced 2 commands."
    assert "malformed" in caplog.text


def test_unknown_key_is_returned_as_is() -> None:
    assert t("no_such_key", "de") == "no_such_key"


def test_malformed_entries_are_left_out() -> None:
    catalogue = Catalogue.from_data(
        "de",
        {
            "messages": {
                "good": "gut",
                "number": 3,
                "no_other": {"plural": "n", "one": "x"},
                "odd_form": {"plural": "n", "lots": "x", "other": "y"},
                "no_param": {"other": "y"},
            },
            "commands": {"video": "", "image": "bild"},
            "notes": {},
        },
    )
    assert dict(catalogue.messages) == {"good": "gut"}
    assert dict(catalogue.commands) == {"image": "bild"}
    assert len(catalogue.problems) == 6


def test_a_broken_file_is_skipped_and_its_members_read_english(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / f"{SOURCE}.json").write_text(json.dumps(raw(SOURCE)), encoding="utf-8")
    (tmp_path / "de.json").write_text('{"messages": {"button_retry": "Erneut"', encoding="utf-8")
    (tmp_path / "fr.json").write_text(
        json.dumps({"messages": {"button_retry": "Réessayer", "x": 1}}), encoding="utf-8"
    )
    with caplog.at_level(logging.WARNING):
        catalogues = Catalogues.load(tmp_path)
    assert set(catalogues.by_locale) == {SOURCE, "fr"}
    assert catalogues.message("button_retry", "de", {}) == "Retry"
    assert catalogues.message("button_retry", "fr", {}) == "Réessayer"
    assert "de.json" in caplog.text and "fr.json" in caplog.text


def test_a_broken_english_catalogue_stops_the_bot(tmp_path: Path) -> None:
    (tmp_path / f"{SOURCE}.json").write_text("{", encoding="utf-8")
    with pytest.raises(CatalogueError):
        Catalogues.load(tmp_path)
    with pytest.raises(CatalogueError):
        Catalogues.load(tmp_path / "nowhere")
    with pytest.raises(CatalogueError):
        Catalogue.from_data("not a locale", {})


def test_plural_form_lookup() -> None:
    plural = Plural("n", {"one": "a", "other": "b"})
    assert plural.form("one") == "a"
    assert plural.form("few") == "b"


# ------------------------------------------------------------------ slash-command strings


def test_every_command_string_is_covered() -> None:
    assert ENGLISH_COMMANDS == {text: text for text in NAMES + DESCRIPTIONS + CHOICE_NAMES}
    for locale in LOCALES:
        commands = raw(locale)["commands"]
        assert set(commands) <= set(ENGLISH_COMMANDS), (locale, "unknown")
        assert set(DESCRIPTIONS + CHOICE_NAMES) <= set(commands), (locale, "missing")


@pytest.mark.parametrize("name", NAMES)
def test_names_are_valid_for_discord(name: str) -> None:
    assert is_valid_name(name)
    for locale in LOCALES:
        translated = raw(locale)["commands"].get(name)
        if translated is not None:
            assert is_valid_name(translated), (locale, translated)


def test_name_validation_rejects_bad_names() -> None:
    assert not is_valid_name("Video")
    assert not is_valid_name("two words")
    assert not is_valid_name("")
    assert not is_valid_name("x" * 33)
    assert is_valid_name("वीडियो")  # Devanagari vowel signs are allowed


@pytest.mark.parametrize("locale", DISCORD_LOCALES)
def test_names_as_discord_gets_them_are_valid_and_unique(locale: str) -> None:
    catalogues = shipped()
    for group in SIBLINGS:
        localized = [catalogues.command(name, locale) or name for name in group]
        assert len(set(localized)) == len(localized), localized
        assert all(is_valid_name(name) for name in localized), localized


@pytest.mark.parametrize("text", DESCRIPTIONS + CHOICE_NAMES)
def test_descriptions_and_choice_names_fit(text: str) -> None:
    assert 1 <= len(text) <= 100
    for locale in LOCALES:
        translated = raw(locale)["commands"][text]
        assert 1 <= len(translated) <= 100, (locale, translated)
        assert translated == translated.strip(), (locale, translated)


def test_choice_names_keep_the_numbers() -> None:
    for text in CHOICE_NAMES:
        digits = "".join(c for c in text if c.isdigit())
        if not digits:
            continue  # a name without numbers may gain some ("1 日" for "daily")
        for locale in LOCALES:
            translated = raw(locale)["commands"][text]
            assert "".join(c for c in translated if c.isdigit()) == digits, (locale, translated)


async def test_translator_translates() -> None:
    translator = FramecastTranslator()
    await translator.load()
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


async def test_translator_serves_given_catalogues() -> None:
    catalogues = Catalogues.from_data(
        {SOURCE: {"commands": {"image": "image"}}, "de": {"commands": {"image": "foto"}}}
    )
    name = context(TranslationContextLocation.command_name)
    assert (
        await FramecastTranslator(catalogues).translate(locale_str("image"), discord.Locale.german, name)
        == "foto"
    )


async def test_the_synced_payload_names_the_command_in_each_members_language() -> None:
    # What discord.py sends when the tree is synced: es-419 gets Spain's names, like its replies.
    client = discord.Client(intents=discord.Intents.none())
    tree = discord.app_commands.CommandTree(client)

    @discord.app_commands.command(
        name=locale_str("image"), description=locale_str("Generate an image from a text prompt")
    )
    async def image(interaction: discord.Interaction) -> None:  # pragma: no cover - never invoked
        pass

    payload = await image.get_translated_payload(tree, FramecastTranslator())
    names = payload["name_localizations"]
    assert names["es-419"] == names["es-ES"] == "imagen"
    assert names["de"] == "bild" and names["pt-BR"] == "imagem"
    assert "en-US" not in names and "nl" not in names
    assert payload["description_localizations"]["es-419"] == "Genera una imagen a partir de un texto"


def test_the_core_never_names_a_message_key() -> None:
    """The core reports typed reasons (enums); only the Discord side knows the catalogue's keys."""
    keys = set(shipped().by_locale[SOURCE].messages)
    core = Path(__file__).resolve().parents[2] / "framecast"
    found = [
        f"{path.relative_to(core.parent)}:{node.lineno}: {node.value!r}"
        for path in sorted(core.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in keys
    ]
    assert not found, "message keys in the core:\n" + "\n".join(found)


@pytest.mark.parametrize("locale", (SOURCE, *LOCALES))
def test_a_personal_queue_has_its_own_words_for_every_message_that_names_a_server(locale: str) -> None:
    """User installs: each message a personal queue can show that names "this server" has a twin
    that speaks of the person's own jobs and queue, in every language."""
    messages = raw(locale)["messages"]
    for server_key, personal_key in PERSONAL_KEYS.items():
        assert texts(messages[personal_key]) != texts(messages[server_key]), (locale, personal_key)
        assert place_key(server_key, personal=True) == personal_key
        assert place_key(server_key, personal=False) == server_key
    if locale == SOURCE:
        for personal_key in PERSONAL_KEYS.values():
            for text in texts(messages[personal_key]):
                assert "this server" not in text.lower() and "server admin" not in text.lower(), personal_key


def test_refusals_in_a_personal_queue_speak_of_your_jobs() -> None:
    assert error_message(JobRefused(Refusal.NOT_FOUND, 4), "en-US", personal=True) == "You have no job #4."
    assert error_message(JobRefused(Refusal.NOT_FOUND, 4), "en-US") == "There is no job #4 in this server."
    full = IntakeError(IntakeProblem.GUILD_QUEUE_FULL, cap=3)
    assert "Your queue" in str(error_message(full, "en-US", personal=True))
    style = IntakeError(IntakeProblem.UNKNOWN_STYLE, style="noir")
    assert "this server" not in str(error_message(style, "en-US", personal=True))
    quota = IntakeError(IntakeProblem.DAILY_QUOTA, kind="image", limit=2, resets_at=100.0)
    assert (
        error_message(quota, "en-US", personal=True)
        == "You have reached your daily image limit (2). It resets <t:100:R>."
    )
