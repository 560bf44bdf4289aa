"""`@tool`: a typed Python function becomes a Bubu tool.

The JSON schema of the arguments comes from the type hints (str, int, float, bool, list[…],
dict[str, …], Literal[…], Optional[…], Annotated[T, "description"]); a parameter with a default is
optional; the docstring is the description, and an ``Args:`` section describes each parameter. A
parameter annotated `ToolContext` receives the call's context and is not shown to the model.

The effect class has no default: it decides what recovery may do after a crash (DESIGN §4), so
the author must say it. A provable write also declares its `target` (the path, from the arguments)
and its `content` (the bytes the file will hold), so the dispatch can record the hashes before and
after and recovery can prove whether the write happened::

    @tool(effect="provable_write", target=lambda a: a["path"], content=lambda a: a["text"].encode())
    def save_note(path: str, text: str) -> str:
        '''Save a note.'''
        return f"saved {path}"

After the function returns, the target must be exactly *after*; if it is still *before*, Bubu
writes the declared content itself, atomically. A function that writes the file itself should use
`bubu.tools.atomic_write`, so the file is never half-written. Functions return a str, a
`ToolResult` or None; any other value is sent as JSON. An exception becomes an error result.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import os
import re
import stat
import types
from collections.abc import Callable, Mapping
from typing import (
    Annotated,
    Any,
    Generic,
    Literal,
    Never,
    ParamSpec,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

from bubu.errors import ToolError
from bubu.events import EffectClass
from bubu.tools.base import JSON, ToolContext, ToolResult, WriteIntent
from bubu.tools.files import atomic_write, file_sha256
from bubu.tools.workspace import guard, os_error_text, outside_reason

P = ParamSpec("P")
R = TypeVar("R")

Args = Mapping[str, JSON]
"""The checked arguments of a call, defaults filled in."""

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""What every provider accepts as a tool name."""

_PARAM = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
"""A parameter line of an Args section: ``name (type): text``."""

_SCALARS: Mapping[object, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


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
    if origin is Literal:
        kinds = {_SCALARS.get(type(a)) for a in args}
        if None in kinds:
            raise TypeError(f"{where}: Literal values must be str, int, float or bool")
        enum: dict[str, JSON] = {"enum": list(args)}
        return {"type": kinds.pop(), **enum} if len(kinds) == 1 else enum
    if origin is Union or origin is types.UnionType:
        options = [a for a in args if a is not type(None)]
        schemas = [json_schema(a, where) for a in options]
        if len(options) < len(args):  # Optional: also null
            schemas.append({"type": "null"})
        if all(set(s) == {"type"} and isinstance(s["type"], str) for s in schemas):
            return {"type": [s["type"] for s in schemas]}
        return {"anyOf": schemas}
    raise TypeError(
        f"{where}: the type {hint!r} has no JSON form; use str, int, float, bool, list, dict, "
        "Literal or Optional of those"
    )


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The description (the docstring without its Args section) and each parameter's text."""
    keep: list[str] = []
    params: dict[str, str] = {}
    header: int | None = None  # indentation of the Args header, while inside that section
    entry: int | None = None  # indentation of its parameter lines
    current: str | None = None
    for line in inspect.cleandoc(doc or "").splitlines():
        indent, stripped = len(line) - len(line.lstrip()), line.strip()
        if header is None and stripped in ("Args:", "Arguments:", "Parameters:"):
            header, entry, current = indent, None, None
            continue
        if header is not None and stripped and indent <= header:
            header = None  # the next section (Returns: …) starts and is kept
        if header is not None:
            m = _PARAM.match(stripped)
            if m and (entry is None or indent <= entry):
                entry, current = indent, m.group(1)
                params[current] = m.group(2).strip()
            elif stripped and current is not None:
                params[current] = f"{params[current]} {stripped}".strip()
            continue
        keep.append(line)
    return "\n".join(keep).strip(), params


# ---- argument checks ----------------------------------------------------------------------------


def _kind(value: object) -> str:
    match value:
        case None:
            return "null"
        case bool():
            return "boolean"
        case int():
            return "integer"
        case float():
            return "number"
        case str():
            return "string"
        case list():
            return "array"
        case _:
            return "object"


def _fits(schema: Mapping[str, JSON], value: object) -> bool:
    if "anyOf" in schema:
        return any(_fits(s, value) for s in schema["anyOf"])
    if "enum" in schema and value not in schema["enum"]:
        return False
    wanted = schema.get("type")
    if wanted is not None:
        kinds = wanted if isinstance(wanted, list) else [wanted]
        kind = _kind(value)
        if kind not in kinds and not (kind == "integer" and "number" in kinds):
            return False
    if isinstance(value, list) and "items" in schema:
        return all(_fits(schema["items"], v) for v in value)
    if isinstance(value, dict) and "additionalProperties" in schema:
        return all(_fits(schema["additionalProperties"], v) for v in value.values())
    return True


def _describe(schema: Mapping[str, JSON]) -> str:
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_describe(s) for s in schema["anyOf"])
    wanted = schema.get("type", "any value")
    return " or ".join(wanted) if isinstance(wanted, list) else str(wanted)


# ---- the tool -----------------------------------------------------------------------------------


class FunctionTool(Generic[P, R]):
    """A tool made from a function by `tool`; calling it calls the function."""

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        effect: EffectClass,
        name: str | None,
        description: str | None,
        target: Callable[[Args], str] | None,
        content: Callable[[Args], bytes | str] | None,
        permission: Callable[[Args], str | None] | None,
    ) -> None:
        self.fn = fn
        self.name: str = name or fn.__name__
        self.effect: EffectClass = effect
        where = f"@tool {self.name}"
        if not NAME.match(self.name):
            raise TypeError(f"{where}: a tool name is 1-64 letters, digits, '_' or '-'")
        summary, docs = parse_docstring(fn.__doc__)
        self.description: str = description or summary or self.name
        self._target, self._content, self._permission = target, content, permission
        self._context: str | None = None
        self._defaults: dict[str, JSON] = {}
        hints = get_type_hints(fn, include_extras=True)
        props: dict[str, JSON] = {}
        required: list[str] = []
        for p in inspect.signature(fn).parameters.values():
            if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                raise TypeError(f"{where}: parameter {p.name} must be a plain or keyword parameter")
            if p.name not in hints:
                raise TypeError(f"{where}: parameter {p.name} needs a type hint")
            if _is_context(hints[p.name]):
                self._context = p.name
                continue
            prop = json_schema(hints[p.name], f"{where}, parameter {p.name}")
            if p.name in docs and "description" not in prop:
                prop["description"] = docs[p.name]
            if p.default is p.empty:
                required.append(p.name)
            else:
                self._defaults[p.name] = p.default
            props[p.name] = prop
        self.parameters: dict[str, JSON] = {
            "type": "object",
            "properties": props,
            "required": required,
            "additionalProperties": False,
        }

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function itself."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<tool {self.name} ({self.effect})>"

    # -- the Tool protocol ------------------------------------------------------------------------

    def permission(self, args: dict[str, JSON], ctx: ToolContext) -> str | None:
        """A write outside the workspace asks; otherwise the declared `permission`, if any."""
        try:
            checked = self.check(args)
            raw = None if self._target is None else _declared(self._target, checked, "target")
        except ToolError:
            return None  # prepare() or run() refuses the same call, so nothing runs
        reason = None if raw is None else outside_reason(ctx, raw)
        if reason is not None or self._permission is None:
            return reason
        try:
            return self._permission(checked)
        except Exception as e:  # user code: refuse the call rather than let it through
            raise ToolError(
                f"the tool's permission= declaration failed: {type(e).__name__}: {e}"
            ) from e

    def write_target(self, args: dict[str, JSON]) -> str | None:
        """The path a provable write names, as given (None when it names none or is invalid)."""
        try:
            return (
                None
                if self._target is None
                else _declared(self._target, self.check(args), "target")
            )
        except ToolError:
            return None

    def prepare(self, args: dict[str, JSON], ctx: ToolContext) -> WriteIntent | None:
        """For a provable write: the target, its hash now and the hash it will have."""
        if self._target is None or self._content is None:
            return None
        checked = self.check(args)
        raw = _declared(self._target, checked, "target")
        path = guard(ctx, raw)
        data = _declared(self._content, checked, "content")
        after = data.encode("utf-8") if isinstance(data, str) else data
        try:
            _check_target(raw, path)
            before = file_sha256(path)
        except OSError as e:
            raise ToolError(os_error_text(e)) from e
        return WriteIntent(
            path=path,
            before_sha256=before,
            after_sha256=hashlib.sha256(after).hexdigest(),
            content=after,
        )

    def run(
        self, args: dict[str, JSON], ctx: ToolContext, intent: WriteIntent | None
    ) -> ToolResult:
        """Check the arguments and call the function; failures become error results."""
        try:
            checked = self.check(args)
            if self._target is not None:
                return self._write(checked, ctx, intent or self.prepare(args, ctx))
            return _result(self._call(checked, ctx), self.name)
        except ToolError as e:
            return ToolResult(output=str(e), is_error=True)
        except OSError as e:
            return ToolResult(output=os_error_text(e), is_error=True)
        except Exception as e:  # the function's own failure is something the model sees
            return ToolResult(output=f"{self.name} failed: {type(e).__name__}: {e}", is_error=True)

    # -- helpers ----------------------------------------------------------------------------------

    def check(self, args: Mapping[str, JSON]) -> dict[str, JSON]:
        """The arguments checked against the schema, defaults filled in; ToolError if they do not fit."""
        if not isinstance(args, Mapping):
            raise ToolError("the arguments must be a JSON object")
        props: Mapping[str, Mapping[str, JSON]] = self.parameters["properties"]
        missing = [k for k in self.parameters["required"] if k not in args]
        if missing:
            raise ToolError(f"missing required argument {', '.join(missing)}")
        for key, value in args.items():
            if key not in props:
                raise ToolError(f"unknown argument {key!r}; expected one of {', '.join(props)}")
            if not _fits(props[key], value):
                raise ToolError(
                    f"argument {key!r} must be {_describe(props[key])}, not {json.dumps(value)[:80]}"
                )
        return {**self._defaults, **args}

    def _call(self, checked: Mapping[str, JSON], ctx: ToolContext) -> object:
        kwargs = dict(checked)
        if self._context is not None:
            kwargs[self._context] = ctx
        out: object = self.fn(**kwargs)  # type: ignore[call-arg]  # checked against the signature
        if inspect.iscoroutine(out):
            out = asyncio.run(out)  # engine tools run in worker threads: no loop is running here
        return out

    def _write(
        self, checked: Mapping[str, JSON], ctx: ToolContext, intent: WriteIntent | None
    ) -> ToolResult:
        assert intent is not None
        assert self._target is not None
        raw = _declared(self._target, checked, "target")
        # Checked again at write time: the path may have been swapped for a symlink since prepare.
        path = guard(ctx, raw)
        if path != intent.path:
            raise ToolError(f"{raw} now resolves to {path}, not {intent.path}; nothing was written")
        now = file_sha256(path)
        if now == intent.after_sha256:
            return ToolResult(output=f"{raw} already has the intended content; nothing to do.")
        if now != intent.before_sha256:
            raise ToolError(f"{raw} changed since this call was prepared; read it again and retry")
        result = _result(self._call(checked, ctx), self.name)
        if result.is_error:
            return result
        now = file_sha256(path)
        if now == intent.before_sha256:
            atomic_write(path, intent.content, os.stat(path) if now is not None else None)
        elif now != intent.after_sha256:
            raise ToolError(
                f"{self.name} left {raw} with content other than it declared (content=); "
                "the write cannot be proven, inspect the file"
            )
        return result if result.output else ToolResult(output=f"wrote {raw}.")


def _check_target(raw: str, path: str) -> None:
    """Refuse a target that is not a writable regular file (reading a FIFO would never end)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(f"{raw} is not a regular file; the tool cannot write it")
    if not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(
        path, os.W_OK
    ):
        raise ToolError(
            f"{raw} is read-only; it was not changed (ask the user to make it writable)"
        )


def _is_context(hint: object) -> bool:
    """A parameter that receives the `ToolContext` (possibly Optional) instead of an argument."""
    return hint is ToolContext or (
        get_origin(hint) in (Union, types.UnionType) and ToolContext in get_args(hint)
    )


def _declared(fn: Callable[[Args], Any], args: Args, what: str) -> Any:
    try:
        value = fn(args)
    except Exception as e:  # the declaration is user code
        raise ToolError(f"the tool's {what}= declaration failed: {type(e).__name__}: {e}") from e
    ok = (str,) if what == "target" else (bytes, str)
    if not isinstance(value, ok):
        raise ToolError(f"the tool's {what}= declaration returned {type(value).__name__}")
    return value


def _result(out: object, name: str) -> ToolResult:
    match out:
        case ToolResult():
            return out
        case str():
            return ToolResult(output=out)
        case None:
            return ToolResult(output="")
        case _:
            try:
                return ToolResult(output=json.dumps(out, ensure_ascii=False, default=str))
            except ValueError as e:
                return ToolResult(
                    output=f"{name} returned {type(out).__name__}: {e}", is_error=True
                )


def tool(
    *bare: Never,
    effect: EffectClass,
    name: str | None = None,
    description: str | None = None,
    target: Callable[[Args], str] | None = None,
    content: Callable[[Args], bytes | str] | None = None,
    permission: Callable[[Args], str | None] | None = None,
) -> Callable[[Callable[P, R]], FunctionTool[P, R]]:
    """Make a tool of a function: ``@tool(effect="read_only")`` (see the module docstring).

    `permission(args)` returns why a call needs the user's approval (or None).
    """
    if bare:  # tool(fn, effect=…): a function passed directly instead of decorated
        raise TypeError(
            "@tool needs an effect class: @tool(effect='read_only'), 'provable_write' (with "
            "target= and content=) or 'side_effecting'"
        )
    if effect not in get_args(EffectClass):
        raise TypeError(f"@tool effect {effect!r} is not one of {', '.join(get_args(EffectClass))}")
    if effect == "provable_write" and (target is None or content is None):
        raise TypeError(
            "@tool(effect='provable_write') needs target= (the path) and content= (the bytes it "
            "will hold), so recovery can prove the outcome"
        )
    if effect != "provable_write" and (target is not None or content is not None):
        raise TypeError("target= and content= are for effect='provable_write' only")

    def wrap(f: Callable[P, R]) -> FunctionTool[P, R]:
        return FunctionTool(
            f,
            effect=effect,
            name=name,
            description=description,
            target=target,
            content=content,
            permission=permission,
        )

    return wrap


__all__ = ["FunctionTool", "json_schema", "parse_docstring", "tool"]
