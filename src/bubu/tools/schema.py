"""Tool arguments as types: the JSON schema a model is sent and the check a call must pass.

One system for every tool. A tool's arguments are a `msgspec.Struct` (the built-in tools declare
one, an `Arguments`, as their `@tool` function's one parameter; `@tool` builds one from any other
function's signature); `json_schema` derives the JSON schema from
the types, and `convert` validates a call's arguments against the same types with msgspec in
strict mode (no string is taken for a number, no boolean for an integer), nested types included.
A call that does not fit gets one sentence naming the argument at fault.

Types with a JSON form: str, int, float, bool, list[…], dict[str, …], Literal[…], an Enum, a
Struct of such fields, Optional[…], and ``T | UnsetType`` (with the default ``UNSET``: an
argument that may be left out but is never null). ``Annotated[T, "text"]`` describes an argument;
``Annotated[T, msgspec.Meta(ge=1)]`` constrains it (checked, not shown in the schema).
"""

from __future__ import annotations

import enum
import json
import re
import types
from collections.abc import Mapping
from typing import Annotated, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import msgspec
from msgspec import UnsetType

from bubu.errors import ToolError
from bubu.tools.base import JSON

S = TypeVar("S", bound=msgspec.Struct)
T = TypeVar("T")

_SCALARS: Mapping[object, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


class Arguments(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Base of a tool's arguments taken as one Struct (the one parameter of a `@tool` function, as
    every built-in's): closed (an unknown argument is refused), keyword-only so optional and
    required fields may come in the order the schema shows them."""


# ---- the schema ---------------------------------------------------------------------------------


def json_schema(hint: object, where: str) -> dict[str, JSON]:
    """The JSON schema of a type hint; TypeError for a type that has no JSON form."""
    origin, args = get_origin(hint), get_args(hint)
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if origin is Annotated:
        inner = json_schema(args[0], where)
        notes = [a for a in args[1:] if isinstance(a, str)]
        return {**inner, "description": " ".join(notes)} if notes else inner
    if hint is list or origin is list:
        return (
            {"type": "array", "items": json_schema(args[0], where)} if args else {"type": "array"}
        )
    if hint is dict or origin is dict:
        if args and args[0] is not str:
            raise TypeError(f"{where}: JSON object keys are strings; use dict[str, …]")
        out: dict[str, JSON] = {"type": "object"}
        if args:
            out["additionalProperties"] = json_schema(args[1], where)
        return out
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return json_schema(Literal[tuple(m.value for m in hint)], where)
    if isinstance(hint, type) and issubclass(hint, msgspec.Struct):
        return struct_schema(hint, where)
    if origin is Literal:
        kinds = {_SCALARS.get(type(a)) for a in args}
        if None in kinds:
            raise TypeError(f"{where}: Literal values must be str, int, float or bool")
        values: dict[str, JSON] = {"enum": list(args)}
        return {"type": kinds.pop(), **values} if len(kinds) == 1 else values
    if origin is Union or origin is types.UnionType:
        given = [a for a in args if a is not UnsetType]
        if len(given) == 1 and len(given) < len(args):  # T | UnsetType: may be left out, not null
            return json_schema(given[0], where)
        options = [a for a in given if a is not type(None)]
        schemas = [json_schema(a, where) for a in options]
        if len(options) < len(given):  # Optional: also null
            schemas.append({"type": "null"})
        if all(set(s) == {"type"} and isinstance(s["type"], str) for s in schemas):
            return {"type": [s["type"] for s in schemas]}
        return {"anyOf": schemas}
    raise TypeError(
        f"{where}: the type {hint!r} has no JSON form; use str, int, float, bool, list, dict, "
        "Literal or Optional of those"
    )


def struct_schema(hint: type[msgspec.Struct], where: str) -> dict[str, JSON]:
    """An object schema from a msgspec Struct: its fields, those without a default required."""
    hints = get_type_hints(hint, include_extras=True)
    props: dict[str, JSON] = {}
    required: list[str] = []
    for f in msgspec.structs.fields(hint):
        props[f.encode_name] = json_schema(hints[f.name], f"{where}, field {f.name}")
        if f.required:
            required.append(f.encode_name)
    # Closed when the Struct refuses unknown fields, as validation then does.
    closed = hint.__struct_config__.forbid_unknown_fields
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": not closed,
    }


def arguments_schema(hint: type[Arguments], where: str) -> dict[str, JSON]:
    """The parameters of a tool that takes its arguments as one `Arguments` Struct: `struct_schema`
    with each argument's description right after its type, the order in which the built-in
    definitions have always been sent."""
    out = struct_schema(hint, where)
    props = out["properties"]
    assert isinstance(props, dict)
    for key, prop in props.items():
        assert isinstance(prop, dict)
        if "description" in prop:
            head = {k: prop[k] for k in ("type", "description") if k in prop}
            props[key] = {**head, **prop}
    return out


def is_typed(hint: object) -> bool:
    """Whether a value of this hint is more than its JSON (a Struct or an Enum, at any depth)."""
    if isinstance(hint, type) and issubclass(hint, enum.Enum | msgspec.Struct):
        return True
    return any(is_typed(a) for a in get_args(hint) if not isinstance(a, str))


def given(value: T | UnsetType) -> T | None:
    """An argument that may be left out: its value, or None when it was."""
    return None if isinstance(value, UnsetType) else value


# ---- the check ----------------------------------------------------------------------------------


def convert(args: object, type_: type[S], parameters: Mapping[str, JSON]) -> S:
    """`args` as `type_` (msgspec, strict: no coercion), or ToolError: one sentence naming the
    argument at fault. `parameters` is the object schema of `type_`, for the words."""
    if not isinstance(args, Mapping):
        raise ToolError("the arguments must be a JSON object")
    props = parameters.get("properties", {})
    assert isinstance(props, Mapping)
    required = parameters.get("required", [])
    assert isinstance(required, list)
    missing = [str(k) for k in required if k not in args]
    if missing:
        raise ToolError(f"missing required argument {', '.join(missing)}")
    for key in args:
        if key not in props:
            raise ToolError(f"unknown argument {key!r}; expected one of {', '.join(props)}")
    try:
        return msgspec.convert(dict(args), type=type_, strict=True)
    except msgspec.ValidationError as e:
        raise ToolError(_validation_text(e, props, args)) from e


_WORDS = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "array": "array",
    "object": "object",
    "null": "null",
}
_EXPECTED = re.compile(r"^Expected `([^`]*)`, got `([^`]*)`")
_BOUND = re.compile(r"^Expected `(?:int|float)` (>=|>|<=|<) (-?[0-9.e+-]+)$")
_AT = re.compile(r"^(.*) - at `\$\.?([^`]*)`$")


def _type_words(spec: str) -> str:
    """msgspec's `int | null` as the words the schema uses: `integer or null`."""
    return " or ".join(_WORDS.get(t.strip(), t.strip()) for t in spec.split("|"))


def _validation_text(
    error: msgspec.ValidationError, props: Mapping[str, JSON], args: Mapping[str, JSON]
) -> str:
    """One short sentence for the model from msgspec's error, naming the argument at fault."""
    text = str(error)
    m = _AT.match(text)
    if m is None:
        return f"the arguments do not fit the schema: {text}"
    detail, path = m.groups()
    key = re.split(r"[.\[]", path, maxsplit=1)[0]
    prop = props.get(key)
    if not isinstance(prop, Mapping):
        return f"argument {path}: {detail}"
    value = args.get(key)
    if path != key:  # deeper inside the argument: say where and what was expected there
        if e := _EXPECTED.match(detail):
            detail = f"expected {_type_words(e.group(1))}, got {_type_words(e.group(2))}"
        elif detail.startswith("Object missing required field"):
            detail = "missing field " + detail.rsplit(" ", 1)[-1].strip("`")
        elif detail.startswith("Object contains unknown field"):
            detail = "unknown field " + detail.rsplit(" ", 1)[-1].strip("`")
        return (
            f"argument {key!r} does not fit its schema ({path}: {detail[:1].lower()}{detail[1:]})"
        )
    if b := _BOUND.match(detail):
        bound = float(b.group(2))
        if b.group(1) == ">" and bound == 0:
            return f"argument {key!r} must be a positive number, not {_shown(value)}"
        words = {">=": "at least", ">": "more than", "<=": "at most", "<": "less than"}
        limit = int(bound) if bound.is_integer() else bound
        return f"argument {key!r} must be {words[b.group(1)]} {limit}, not {_shown(value)}"
    if "enum" in prop or "anyOf" in prop:
        return f"argument {key!r} must be {_describe(prop)}, not {_shown(value)}"
    return f"argument {key!r} must be {_describe(prop)}, not {_json_kind(value)}"


def _shown(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)[:80]


_ARTICLES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "array": "an array",
    "object": "an object",
    "null": "null",
}


def _describe(schema: Mapping[str, JSON]) -> str:
    if "enum" in schema:
        values = schema["enum"]
        assert isinstance(values, list)
        return "one of " + ", ".join(json.dumps(v) for v in values)
    if "anyOf" in schema:
        options = schema["anyOf"]
        assert isinstance(options, list)
        return " or ".join(_describe(s) for s in options if isinstance(s, Mapping))
    wanted = schema.get("type", "any value")
    kinds = wanted if isinstance(wanted, list) else [wanted]
    return " or ".join(_ARTICLES.get(str(k), str(k)) for k in kinds)


def _json_kind(value: object) -> str:
    match value:
        case None:
            return "null"
        case bool():
            return "a boolean"
        case int() | float():
            return "a number"
        case str():
            return "a string"
        case list():
            return "an array"
        case _:
            return "an object"


__all__ = [
    "Arguments",
    "arguments_schema",
    "convert",
    "given",
    "is_typed",
    "json_schema",
    "struct_schema",
]
