"""Check REST requests against Discord's published OpenAPI spec, as real Discord would.

The spec (``discord-openapi.json`` next to this module, see ``README-openapi.md``) is loaded once per
process, lazily, and adjusted where it and real Discord disagree (every adjustment says why, below).
Validators are compiled once per operation (method + path template) and per query parameter.

    check = spec().check("POST", "/channels/1/messages", query={}, body={"content": "x" * 2001})
    check.problems              # [] when Discord would accept it; here one Problem, str():
                                # "body.content: must be 2000 or fewer in length (got 2001)"
    form_errors(check.problems) # Discord's nested ``errors`` object for a 400 code 50035 answer

``check`` answers a :class:`SpecCheck`: the spec's path template (``None``: the route is not in the
spec, which is reported, never refused) and the readable problems (path + message).
"""

from __future__ import annotations

import ast
import copy
import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

__all__ = ["SPEC_PATH", "DiscordSpec", "Problem", "SpecCheck", "SpecViolation", "form_errors", "spec"]

#: The vendored snapshot of discord/discord-api-spec (MIT), so a fresh clone has it.
SPEC_PATH = Path(__file__).with_name("discord-openapi.json")
_URI = "urn:discord-openapi"
_MAX_PROBLEMS = 20

# Discord's documented name rule ``^[-_'\p{L}\p{N}\p{sc=Deva}\p{sc=Thai}]{1,32}$`` for chat-input commands
# and options, lower case where a lower-case form exists. Python's ``re`` (which jsonschema uses) has no
# ``\p{..}``: ``\w`` covers letters, digits and ``_``; the explicit ranges are Devanagari and Thai (their
# combining vowel signs are not ``\w``); the look-ahead refuses ASCII capitals (an approximation of the
# lower-case rule, the same one the fake's own check applies on top).
_CHAT_INPUT_NAME = r"^(?!.*[A-Z])[-_'\w\u0900-\u097F\u0E00-\u0E7F]{1,32}$"

_TYPE_CODES = {
    "integer": "NUMBER_TYPE_COERCE",
    "number": "NUMBER_TYPE_COERCE",
    "boolean": "BOOLEAN_TYPE_COERCE",
    "array": "LIST_TYPE_CONVERT",
    "object": "DICT_TYPE_CONVERT",
    "string": "STRING_TYPE_CONVERT",
}
_JSON_TYPES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
    type(None): "null",
}
_BOOL_WORDS = {"true": True, "false": False, "1": True, "0": False}
_REQUIRED_RE = re.compile(r"^(.*) is a required property$")


@dataclass(frozen=True)
class Problem:
    """One thing the spec refuses: where (``body.embeds.0.title``, ``query.limit``) and why."""

    #: "body" or "query"
    part: str
    #: the path inside that part (keys and list indexes)
    location: tuple[str | int, ...]
    message: str
    #: Discord's error code for it (``BASE_TYPE_MAX_LENGTH``...), used in the 400 answer
    code: str = "BASE_TYPE_INVALID"

    @property
    def where(self) -> str:
        """``body.embeds.0.title``: the part and the path, dotted."""
        return ".".join([self.part, *(str(p) for p in self.location)])

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass(frozen=True)
class SpecCheck:
    """What the spec says about one request."""

    #: the spec's path template (``/channels/{channel_id}/messages``); None: not in the spec
    template: str | None
    #: False when the path is in the spec but not with this method
    method_known: bool = True
    problems: list[Problem] = field(default_factory=list)

    @property
    def in_spec(self) -> bool:
        """The spec describes this method + path."""
        return self.template is not None and self.method_known


@dataclass
class SpecViolation:
    """A request the spec refuses (``refused``: answered 400) or does not describe (reported only)."""

    method: str
    path: str
    #: the spec's path template, None when the route is not in the spec
    template: str | None
    problems: list[Problem]
    refused: bool

    def __str__(self) -> str:
        # The template, not the path, when there is one: paths carry interaction tokens.
        if self.template is None:
            return f"{self.method} {self.path}: route not in the spec"
        if not self.problems:
            return f"{self.method} {self.template}: method not in the spec"
        return f"{self.method} {self.template}: " + "; ".join(str(p) for p in self.problems)


@dataclass
class _Operation:
    template: str
    body: Draft202012Validator | None
    body_required: bool
    #: query parameter name -> (validator, required)
    query: dict[str, tuple[Draft202012Validator, bool]]


def _adjust(document: dict[str, Any]) -> dict[str, Any]:
    """The spec as real Discord applies it (each change says why)."""
    schemas = document["components"]["schemas"]

    # Discord accepts JSON integers for snowflakes as well as strings (DISCORD_NOTES: discord.py sends
    # attachment placeholder ids, allowed-mention users and message-reference ids as ints). ``pattern``
    # only constrains strings and ``minimum``/``maximum`` only numbers, so each form keeps its rule.
    snowflake = schemas["SnowflakeType"]
    snowflake["type"] = ["string", "integer"]
    snowflake["minimum"] = 0
    snowflake["maximum"] = 2**64 - 1

    def unions(node: Any) -> None:
        # The spec's README: every anyOf/oneOf union means "one of these formats" (x-discord-union), and
        # anyOf is used where branches can overlap. A strict oneOf would refuse a payload that two
        # overlapping branches both describe, which Discord accepts; anyOf also stops at the first match.
        if isinstance(node, dict):
            if "oneOf" in node and "anyOf" not in node:
                node["anyOf"] = node.pop("oneOf")
            if isinstance(node.get("anyOf"), list):
                # Most nullable fields carry a value: try their null branch last (anyOf order is free).
                node["anyOf"].sort(key=lambda branch: branch == {"type": "null"})
            for value in node.values():
                unions(value)
        elif isinstance(node, list):
            for value in node:
                unions(value)

    unions(document)

    # Documented limits the spec leaves out (its README: "follow the docs, not the spec"):
    # a modal has 1 to 5 top-level components (the spec allows 40).
    schemas["ModalInteractionCallbackRequestData"]["properties"]["components"]["maxItems"] = 5
    # message content is at most 2000 characters for a bot (the spec's 4000 is the Nitro users' limit; the
    # docs: "up to 2000 characters"); webhook and interaction bodies already say 2000.
    for key in ("MessageCreateRequest", "MessageEditRequestPartial", "BaseCreateMessageCreateRequest"):
        schemas[key]["properties"]["content"]["maxLength"] = 2000
    # chat-input command and option names follow the name rule (the spec only bounds their length);
    # user and message commands (type 2/3) may use spaces and capitals.
    name_rule = {
        "properties": {
            "name": {"pattern": _CHAT_INPUT_NAME},
            "name_localizations": {"additionalProperties": {"pattern": _CHAT_INPUT_NAME}},
        }
    }
    for key in ("ApplicationCommandCreateRequest", "ApplicationCommandUpdateRequest"):
        chat_input = {"properties": {"type": {"enum": [1, None]}}}
        schemas[key].setdefault("allOf", []).append({"if": chat_input, "then": copy.deepcopy(name_rule)})
    for key, schema in schemas.items():
        if key.startswith("ApplicationCommand") and key.endswith("Option"):
            schema.setdefault("allOf", []).append(copy.deepcopy(name_rule))
    return document


def _inline_refs(document: dict[str, Any]) -> None:
    """Replace every local ``{"$ref": "#/..."}`` by the very object it points to (a graph, cyclic where
    the spec is recursive), so validating never looks a reference up: a third of the time otherwise."""

    def target(ref: str) -> Any:
        node: Any = document
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            node = node[int(part)] if isinstance(node, list) else node[part]
        while isinstance(node, dict) and set(node) == {"$ref"} and node["$ref"].startswith("#/"):
            node = target(node["$ref"])
        return node

    def swap(node: Any) -> Any:
        if not (
            isinstance(node, dict) and isinstance(node.get("$ref"), str) and node["$ref"].startswith("#/")
        ):
            return node
        found = target(node["$ref"])
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        # 2020-12 applies keywords next to a $ref as well; keep them beside the target.
        return {"allOf": [found], **siblings} if siblings else found

    def walk(node: Any) -> None:
        # Walk the document as written; a swapped-in target is walked where it lives, not again here.
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value)
                node[key] = swap(value)
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value)
                node[index] = swap(value)

    walk(document)


def _tags(branch: Any) -> list[Any] | None:
    """The values a union branch allows for its ``type`` key (None: the branch has no such tag)."""
    if not isinstance(branch, dict):
        return None
    tag = (branch.get("properties") or {}).get("type")
    if not isinstance(tag, dict):
        return None
    if isinstance(tag.get("enum"), list):
        return list(tag["enum"])
    return [tag["const"]] if "const" in tag else None


def _dispatch_tagged_unions(document: dict[str, Any]) -> None:
    """Turn each union of shapes told apart by their ``type`` tag (callback types, component types,
    option types) into "the tag is one of these; then the shape of that tag".

    Same verdicts, but a value is checked against its own shape only: anyOf checks it against every
    shape before the right one (a modal callback took 8 ms, 0.3 ms this way), and the problems it
    reports are the right shape's, not a union error."""
    seen: set[int] = set()

    def walk(node: Any) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, list):
            for value in node:
                walk(value)
            return
        if not isinstance(node, dict):
            return
        for value in list(node.values()):
            walk(value)
        branches = node.get("anyOf")
        if not isinstance(branches, list) or len(branches) < 2:
            return
        tags = [_tags(branch) for branch in branches]
        flat = [t for ts in tags if ts is not None for t in ts]
        if any(ts is None for ts in tags) or len(flat) != len(set(map(repr, flat))):
            return
        try:
            every = sorted(flat)
        except TypeError:
            every = sorted(flat, key=repr)
        rules: list[Any] = [{"type": "object", "required": ["type"], "properties": {"type": {"enum": every}}}]
        for branch, branch_tags in zip(branches, tags, strict=True):
            when = {"required": ["type"], "properties": {"type": {"enum": branch_tags}}}
            rules.append({"if": when, "then": branch})
        del node["anyOf"]
        node.setdefault("allOf", []).extend(rules)

    walk(document)


class DiscordSpec:
    """Discord's OpenAPI document, matched against requests; build with :func:`spec`."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = _adjust(document)
        _inline_refs(self.document)
        _dispatch_tagged_unions(self.document)
        resource = Resource.from_contents(self.document, default_specification=DRAFT202012)
        self._registry: Registry[Any] = Registry().with_resource(_URI, resource)
        # (method, segment count) -> [(segments, template)], the most literal templates first
        self._index: dict[tuple[str, int], list[tuple[tuple[str, ...], str]]] = {}
        self._paths_only: dict[int, list[tuple[tuple[str, ...], str]]] = {}
        for template, item in self.document["paths"].items():
            segments = tuple(template.strip("/").split("/"))
            self._paths_only.setdefault(len(segments), []).append((segments, template))
            for method in item:
                if method in ("get", "put", "post", "patch", "delete", "head", "options"):
                    self._index.setdefault((method.upper(), len(segments)), []).append((segments, template))
        for bucket in (*self._index.values(), *self._paths_only.values()):
            bucket.sort(key=lambda entry: -sum(not s.startswith("{") for s in entry[0]))
        self._operations: dict[tuple[str, str], _Operation] = {}

    # ------------------------------------------------------------------ matching ----------
    @staticmethod
    def _find(candidates: Iterable[tuple[tuple[str, ...], str]], parts: Sequence[str]) -> str | None:
        for segments, template in candidates:
            if all(
                seg == part or (seg.startswith("{") and part != "")
                for seg, part in zip(segments, parts, strict=True)
            ):
                return template
        return None

    def match(self, method: str, path: str) -> SpecCheck:
        """The spec's template for ``method path`` (path below ``/api/v10``), without checking anything."""
        parts = path.strip("/").split("/")
        template = self._find(self._index.get((method.upper(), len(parts)), ()), parts)
        if template is not None:
            return SpecCheck(template)
        other = self._find(self._paths_only.get(len(parts), ()), parts)
        return SpecCheck(other, method_known=False)

    # ------------------------------------------------------------------ compiling ---------
    def _validator(self, schema: Any) -> Draft202012Validator:
        # The local $refs are inlined already; the registry (the whole document) resolves any other.
        return Draft202012Validator(schema, registry=self._registry)

    def _operation(self, method: str, template: str) -> _Operation:
        """The compiled validators of one operation, built on first use and kept."""
        key = (method, template)
        op = self._operations.get(key)
        if op is not None:
            return op
        item = self.document["paths"][template]
        operation = item[method.lower()]
        body: Draft202012Validator | None = None
        request_body = operation.get("requestBody") or {}
        content = request_body.get("content") or {}
        # payload_json of a multipart request is the JSON body (the files[n] parts are separate).
        for ctype in ("application/json", "multipart/form-data", *content):
            if ctype in content:
                body = self._validator(content[ctype]["schema"])
                break
        query: dict[str, tuple[Draft202012Validator, bool]] = {}
        for param in [*item.get("parameters", ()), *operation.get("parameters", ())]:
            if param.get("in") == "query":
                query[param["name"]] = (self._validator(param["schema"]), bool(param.get("required")))
        op = _Operation(template, body, bool(request_body.get("required")) and body is not None, query)
        self._operations[key] = op
        return op

    # ------------------------------------------------------------------ checking ----------
    def check(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
    ) -> SpecCheck:
        """Match ``method path`` and validate the JSON body (or ``payload_json``) and the query string."""
        method = method.upper()
        found = self.match(method, path)
        if not found.in_spec:
            return found
        assert found.template is not None
        op = self._operation(method, found.template)
        problems: list[Problem] = []
        if op.body is not None:
            if body is None:
                if op.body_required:
                    problems.append(Problem("body", (), "a request body is required", "BASE_TYPE_REQUIRED"))
            else:
                problems.extend(_problems("body", op.body.iter_errors(body)))
        for name, (validator, required) in op.query.items():
            if query is None or name not in query:
                if required:
                    problems.append(
                        Problem("query", (name,), "this parameter is required", "BASE_TYPE_REQUIRED")
                    )
                continue
            raw = query[name]
            # Query values are strings on the wire: accept one whose int or bool reading validates.
            readings: list[Any] = [raw]
            if re.fullmatch(r"-?\d+", raw):
                readings.append(int(raw))
            if raw.lower() in _BOOL_WORDS:
                readings.append(_BOOL_WORDS[raw.lower()])
            if any(validator.is_valid(value) for value in readings):
                continue
            # Explain with the reading of the right JSON type if there is one (``limit=0``: "below the
            # minimum", not "not an integer"), else with the string itself.
            explained = [list(validator.iter_errors(value)) for value in reversed(readings)]
            errors = next((e for e in explained if not any(_discriminated(x) for x in e)), explained[-1])
            problems.extend(_problems("query", errors, prefix=(name,)))
        return SpecCheck(found.template, problems=problems[:_MAX_PROBLEMS])


@functools.cache
def spec() -> DiscordSpec:
    """The spec, loaded on first use and shared by the whole test session."""
    with SPEC_PATH.open(encoding="utf-8") as fh:
        return DiscordSpec(json.load(fh))


# ---------------------------------------------------------------------- readable errors ---


def _discriminated(error: ValidationError) -> bool:
    """The branch of a union that ``error`` belongs to is plainly not the one meant: the value has another
    JSON type than the branch, or another ``type`` tag (callback type, component type, option type)."""
    relative = list(error.relative_path)
    if error.validator == "type" and not relative:
        return True
    return error.validator in ("const", "enum") and relative == ["type"]


def _tag_error(error: ValidationError, branches: list[list[ValidationError]]) -> ValidationError | None:
    """When every branch of a union refuses the same tag (the value itself in a union of constants, or its
    ``type`` key in a union of shapes): one error naming every value the union knows there."""
    found: list[ValidationError] = []
    for errs in branches:
        tag = next((e for e in errs if e.validator in ("const", "enum") and _is_tag_path(e)), None)
        if tag is None:
            return None
        found.append(tag)
    if len({tuple(e.relative_path) for e in found}) != 1:
        return None
    values = [v for e in found for v in (e.validator_value if e.validator == "enum" else [e.validator_value])]
    try:
        allowed = sorted(set(values))
    except TypeError:
        allowed = sorted(set(values), key=str)
    first = found[0]
    return ValidationError(
        f"{first.instance!r} is not one of {allowed}",
        validator="enum",
        validator_value=allowed,
        instance=first.instance,
        path=first.relative_path,
        parent=error,
    )


def _is_tag_path(error: ValidationError) -> bool:
    return list(error.relative_path) in ([], ["type"])


def _leaves(error: ValidationError) -> list[ValidationError]:
    """The errors that explain ``error``: inside a union, those of the branch the value was meant for."""
    if error.validator not in ("anyOf", "oneOf") or not error.context:
        return [error]
    branches: dict[Any, list[ValidationError]] = {}
    for sub in error.context:
        branches.setdefault(sub.relative_schema_path[0], []).append(sub)
    tagged = _tag_error(error, list(branches.values()))
    if tagged is not None:
        return [tagged]
    meant = [errs for errs in branches.values() if not any(_discriminated(e) for e in errs)]
    if len(meant) != 1:
        # No branch, or several, fit the value's type and tag: the union error itself says it best,
        # unless every branch is refused only for its JSON type.
        return [error]
    out: list[ValidationError] = []
    for sub in meant[0]:
        out.extend(_leaves(sub))
    return out


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _describe(error: ValidationError) -> tuple[tuple[str | int, ...], str, str]:
    """(location, message, Discord code) for one leaf error."""
    location = tuple(error.absolute_path)
    value, rule, instance = error.validator, error.validator_value, error.instance
    if value == "required":
        m = _REQUIRED_RE.match(error.message)
        missing = ast.literal_eval(m.group(1)) if m else "?"
        return (*location, missing), "this field is required", "BASE_TYPE_REQUIRED"
    if value in ("maxLength", "maxItems", "maxProperties"):
        return location, f"must be {rule} or fewer in length (got {len(instance)})", "BASE_TYPE_MAX_LENGTH"
    if value in ("minLength", "minItems", "minProperties"):
        return location, f"must be {rule} or more in length (got {len(instance)})", "BASE_TYPE_MIN_LENGTH"
    if value == "type":
        types = [rule] if isinstance(rule, str) else list(rule)
        wanted = " or ".join(t for t in types if t != "null") or "null"
        if "null" in types:
            wanted += " (or null)"
        code = _TYPE_CODES.get(types[0], "BASE_TYPE_INVALID")
        return location, f"must be {wanted}, got {_json_type(instance)} {instance!r:.60}", code
    if value in ("enum", "const"):
        choices = rule if value == "enum" else [rule]
        return location, f"value {instance!r:.60} must be one of {choices}", "BASE_TYPE_CHOICES"
    if value == "pattern":
        return location, f"{instance!r:.60} does not match {rule}", "STRING_TYPE_REGEX"
    if value in ("maximum", "exclusiveMaximum"):
        return location, f"{instance!r} is above the maximum {rule}", "NUMBER_TYPE_MAX"
    if value in ("minimum", "exclusiveMinimum"):
        return location, f"{instance!r} is below the minimum {rule}", "NUMBER_TYPE_MIN"
    if value == "uniqueItems":
        return location, "items must be unique", "BASE_TYPE_DUPLICATES"
    if value in ("anyOf", "oneOf"):
        return location, f"{instance!r:.80} matches none of the allowed forms", "BASE_TYPE_CHOICES"
    return location, error.message, "BASE_TYPE_INVALID"


def _problems(
    part: str, errors: Iterable[ValidationError], *, prefix: tuple[str | int, ...] = ()
) -> list[Problem]:
    out: list[Problem] = []
    for error in errors:
        for leaf in _leaves(error):
            location, message, code = _describe(leaf)
            problem = Problem(part, (*prefix, *location), message, code)
            if problem not in out:
                out.append(problem)
    out.sort(key=lambda p: [str(x) for x in p.location])
    return out


def form_errors(problems: Iterable[Problem]) -> dict[str, Any]:
    """Discord's nested ``errors`` object (``{"embeds": {"0": {"title": {"_errors": [...]}}}}``)."""
    errors: dict[str, Any] = {}
    for problem in problems:
        node = errors
        for key in problem.location:
            node = node.setdefault(str(key), {})
        node.setdefault("_errors", []).append({"code": problem.code, "message": problem.message})
    return errors
