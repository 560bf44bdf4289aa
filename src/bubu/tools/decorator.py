"""`@tool`: a typed Python function becomes a Bubu tool.

The JSON schema of the arguments comes from the type hints (str, int, float, bool, list[…],
dict[str, …], Literal[…], an Enum, a `msgspec.Struct` of such fields, Optional[…],
Annotated[T, "description"]); a parameter with a default is optional. Arguments are validated by
msgspec against those same types, nested ones included (a list of Structs, an optional field, an
Enum), and a call that does not fit gets one sentence naming the argument at fault
(`bubu.tools.schema`, which the built-in tools use too); a Struct or an Enum parameter receives
the converted value; the docstring is the description, and an ``Args:`` section describes each
parameter. A parameter annotated `ToolContext` receives the call's context and is not shown to
the model.

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

The built-in tools are declared the same way, with the options a tool that does its own file work
needs; they are there for every tool:

- A function whose only parameter (besides the context) is typed with a subclass of
  `bubu.tools.schema.Arguments` takes the arguments as that one Struct: its fields are the tool's
  arguments, each described by its own ``Annotated`` text.
- ``path_arg="path"`` names the argument that is a path in the workspace: a path that leads
  outside asks for permission (unless `permission=` is given, which then decides), calls of one
  response on the same path run in order, and a path found leading out while the tool walks it
  is refused in words.
- ``prepare=`` makes a provable write that computes its own intent: ``prepare(args, ctx)`` returns
  the `WriteIntent` (the target, its hash now and after, the content), and the function, which
  receives it through a parameter typed `WriteIntent`, must perform exactly that write,
  atomically (a call run without a prepared intent prepares one first). `args` is what the
  function receives: the Struct, or the checked arguments.
- ``permission="command"`` (the name of an argument): every call asks, whatever its arguments,
  and the question shows that argument.
- ``validate=`` checks the arguments as given, before the schema does, raising `ToolError` with
  words of its own.
"""

from __future__ import annotations

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
    Never,
    ParamSpec,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
)

import msgspec

from bubu.errors import ToolError
from bubu.events import EffectClass
from bubu.toolfacts import NO_FACTS, ToolFacts, declare
from bubu.tools.base import JSON, ToolContext, ToolResult, WriteIntent
from bubu.tools.guard import Escape
from bubu.tools.schema import (
    Arguments,
    arguments_schema,
    convert,
    is_typed,
    json_schema,
    struct_schema,
)
from bubu.tools.workspace import escape_text, guard, os_error_text, outside_reason, resolve

P = ParamSpec("P")
R = TypeVar("R")

Args = Mapping[str, JSON]
"""The checked arguments of a call, defaults filled in."""

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""What every provider accepts as a tool name."""

_PARAM = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
"""A parameter line of an Args section: ``name (type): text``."""


# ---- the docstring ------------------------------------------------------------------------------


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
        permission: Callable[[Args], str | None] | str | None,
        path_arg: str | None = None,
        prepare: Callable[[Any, ToolContext], WriteIntent] | None = None,
        validate: Callable[[Args], None] | None = None,
        facts: ToolFacts | None = None,
    ) -> None:
        self.fn = fn
        self.name: str = name or fn.__name__
        self.facts: ToolFacts = facts or NO_FACTS
        self.effect: EffectClass = effect
        self.path_arg: str | None = path_arg
        where = f"@tool {self.name}"
        if not NAME.match(self.name):
            raise TypeError(f"{where}: a tool name is 1-64 letters, digits, '_' or '-'")
        summary, docs = parse_docstring(fn.__doc__)
        self.description: str = description or summary or self.name
        if facts is not None:
            declare(self.name, facts)
        self._target, self._content, self._permission = target, content, permission
        self._prepare, self._validate = prepare, validate
        self._context: str | None = None
        self._intent: str | None = None
        self._whole: str | None = None  # the parameter that takes the arguments as one Struct
        self._defaults: dict[str, JSON] = {}
        hints = get_type_hints(fn, include_extras=True)
        params: list[inspect.Parameter] = []
        for p in inspect.signature(fn).parameters.values():
            if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                raise TypeError(f"{where}: parameter {p.name} must be a plain or keyword parameter")
            if p.name not in hints:
                raise TypeError(f"{where}: parameter {p.name} needs a type hint")
            if _is_context(hints[p.name]):
                self._context = p.name
            elif _is_intent(hints[p.name]):
                self._intent = p.name
            else:
                params.append(p)
        if self._intent is not None and prepare is None:
            raise TypeError(f"{where}: a WriteIntent parameter is for a tool with prepare=")
        whole = hints[params[0].name] if len(params) == 1 else None
        if isinstance(whole, type) and issubclass(whole, Arguments):
            if params[0].default is not params[0].empty:
                raise TypeError(
                    f"{where}: {params[0].name}, the arguments as one Struct, takes no default"
                )
            # The arguments are the Struct's fields, sent in the order the built-ins always were.
            self._whole = params[0].name
            self._args_type: type[msgspec.Struct] = whole
            self._converted: frozenset[str] = frozenset()
            self.parameters: dict[str, JSON] = arguments_schema(whole, where)
        else:
            self._from_parameters(params, hints, docs, where)
        props = self.parameters["properties"]
        for option, arg in (("path_arg", path_arg), ("permission", permission)):
            if isinstance(arg, str) and arg not in props:
                raise TypeError(f"{where}: {option}={arg!r} names no argument of the tool")

    def _from_parameters(
        self,
        params: list[inspect.Parameter],
        hints: dict[str, Any],
        docs: dict[str, str],
        where: str,
    ) -> None:
        fields: list[tuple[str, object] | tuple[str, object, object]] = []
        for p in params:
            hint = hints[p.name]
            prop = json_schema(hint, f"{where}, parameter {p.name}")  # TypeError: no JSON form
            if p.name in docs and "description" not in prop:
                hint = Annotated[hint, docs[p.name]]  # the docstring describes it
            if p.default is p.empty:
                fields.append((p.name, hint))
            else:
                self._defaults[p.name] = p.default
                fields.append((p.name, hint, p.default))
        # The arguments as a Struct: the schema and the check both come from it
        # (`bubu.tools.schema`).
        self._args_type = msgspec.defstruct(
            f"{self.name}_arguments", fields, kw_only=True, forbid_unknown_fields=True
        )
        self._converted = frozenset(f[0] for f in fields if is_typed(f[1]))
        self.parameters = struct_schema(self._args_type, where)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function itself."""
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<tool {self.name} ({self.effect})>"

    # -- the Tool protocol ------------------------------------------------------------------------

    def permission(self, args: dict[str, JSON], ctx: ToolContext) -> str | None:
        """Why the call asks: the argument `permission` names; else a path outside the workspace
        (the `path_arg` or the write's target); otherwise the declared `permission`, if any."""
        if isinstance(self._permission, str):  # every call asks, whatever its arguments
            shown = args.get(self._permission)
            return (
                shown
                if isinstance(shown, str) and shown
                else f"{self.name} (no {self._permission} given)"
            )
        if self.path_arg is not None and self._permission is None:
            raw = args.get(self.path_arg)
            return outside_reason(ctx, raw) if isinstance(raw, str) else None
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
        if self.path_arg is not None:
            raw = args.get(self.path_arg) if self.effect == "provable_write" else None
            return raw if isinstance(raw, str) else None
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
        if self._prepare is not None:
            return self._planned(self._convert(args), args, ctx)
        if self._target is None or self._content is None:
            return None
        # Imported here: bubu.tools.files declares its tools with this module's `tool`.
        from bubu.tools.files import file_sha256

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
            if self._target is not None:
                return self._write(self.check(args), ctx, intent or self.prepare(args, ctx))
            typed = self._convert(args)
            if self._prepare is not None and intent is None:
                intent = self._planned(typed, args, ctx)
            return _result(self._call(args, ctx, typed, intent), self.name)
        except Escape as e:
            if self.path_arg is None:
                return ToolResult(output=str(e), is_error=True)
            # Met mid-walk: the path changed into a way out after it was resolved inside.
            raw = args.get(self.path_arg)
            return ToolResult(
                output=escape_text(raw if isinstance(raw, str) else ".", e), is_error=True
            )
        except ToolError as e:
            return ToolResult(output=str(e), is_error=True)
        except OSError as e:
            return ToolResult(output=os_error_text(e), is_error=True)
        except Exception as e:  # the function's own failure is something the model sees
            return ToolResult(output=f"{self.name} failed: {type(e).__name__}: {e}", is_error=True)

    # -- helpers ----------------------------------------------------------------------------------

    def check(self, args: Mapping[str, JSON]) -> dict[str, JSON]:
        """The arguments checked against the parameter types (nested ones too), defaults filled
        in; ToolError, one sentence naming the argument, if they do not fit."""
        self._convert(args)
        return {**self._defaults, **args}

    def _convert(self, args: Mapping[str, JSON]) -> msgspec.Struct:
        """The arguments as the parameter types (msgspec, strict: no coercion of strings), after
        the tool's own `validate`."""
        if self._validate is not None and isinstance(args, Mapping):
            try:
                self._validate(args)
            except ToolError:
                raise
            except Exception as e:  # user code
                raise ToolError(
                    f"the tool's validate= declaration failed: {type(e).__name__}: {e}"
                ) from e
        return convert(args, self._args_type, self.parameters)

    def _planned(
        self, typed: msgspec.Struct, args: Mapping[str, JSON], ctx: ToolContext
    ) -> WriteIntent:
        """The intent `prepare=` computes, from the arguments as the function takes them."""
        assert self._prepare is not None
        try:
            out = self._prepare(typed if self._whole else {**self._defaults, **args}, ctx)
        except ToolError:
            raise
        except OSError as e:
            raise ToolError(os_error_text(e)) from e
        except Exception as e:  # user code
            raise ToolError(
                f"the tool's prepare= declaration failed: {type(e).__name__}: {e}"
            ) from e
        if not isinstance(out, WriteIntent):
            raise ToolError(f"the tool's prepare= declaration returned {type(out).__name__}")
        return out

    def _call(
        self,
        args: Mapping[str, JSON],
        ctx: ToolContext,
        typed: msgspec.Struct | None = None,
        intent: WriteIntent | None = None,
    ) -> object:
        if typed is None:
            typed = self._convert(args) if self._whole or self._converted else None
        if self._whole is not None:
            kwargs: dict[str, Any] = {self._whole: typed}
        else:
            kwargs = {**self._defaults, **args}
            if self._converted:  # Structs and Enums reach the function as themselves, not JSON
                kwargs.update({p: getattr(typed, p) for p in self._converted})
        if self._context is not None:
            kwargs[self._context] = ctx
        if self._intent is not None:
            kwargs[self._intent] = intent
        out: object = self.fn(**kwargs)  # type: ignore[call-arg]  # checked against the signature
        if inspect.iscoroutine(out):
            import asyncio  # only for a coroutine tool: a run without one never loads it

            out = asyncio.run(out)  # engine tools run in worker threads: no loop is running here
        return out

    def _write(
        self, checked: Mapping[str, JSON], ctx: ToolContext, intent: WriteIntent | None
    ) -> ToolResult:
        from bubu.tools.files import atomic_write, file_sha256, locked_path

        assert intent is not None
        assert self._target is not None
        raw = _declared(self._target, checked, "target")
        # Checked again at write time: the path may have been swapped for a symlink since prepare.
        path = guard(ctx, raw)
        if path != intent.path:
            raise ToolError(f"{raw} now resolves to {path}, not {intent.path}; nothing was written")
        # The check, the function and the fallback write hold the file against other Bubu writes.
        with locked_path(path, ctx):
            now = file_sha256(path)
            if now == intent.after_sha256:
                return ToolResult(output=f"{raw} already has the intended content; nothing to do.")
            if now != intent.before_sha256:
                raise ToolError(
                    f"{raw} changed since this call was prepared; read it again and retry"
                )
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

    def touches(self, args: dict[str, JSON], ctx: ToolContext) -> str | None:
        """The resolved path the call reads or writes (its `path_arg`, the workspace when that is
        left out, or the target of a provable write), so calls on one file run in order."""
        try:
            if self.path_arg is not None:
                raw = args.get(self.path_arg, ".")
                return resolve(ctx, raw) if isinstance(raw, str) else None
            if self._target is None:
                return None
            return resolve(ctx, _declared(self._target, self.check(args), "target"))
        except (ToolError, OSError):
            return None


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


def _is_intent(hint: object) -> bool:
    """A parameter that receives the prepared `WriteIntent` instead of an argument."""
    return hint is WriteIntent or (
        get_origin(hint) in (Union, types.UnionType) and WriteIntent in get_args(hint)
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
    permission: Callable[[Args], str | None] | str | None = None,
    path_arg: str | None = None,
    prepare: Callable[[Any, ToolContext], WriteIntent] | None = None,
    validate: Callable[[Args], None] | None = None,
    facts: ToolFacts | None = None,
) -> Callable[[Callable[P, R]], FunctionTool[P, R]]:
    """Make a tool of a function: ``@tool(effect="read_only")`` (see the module docstring).

    `name` and `description` replace the function's name and docstring. `permission(args)`
    returns why a call needs the user's approval (or None); given the name of an argument
    instead, every call asks and shows it. `path_arg` names the argument that is a path in the
    workspace. A provable write declares `target` and `content`, or `prepare(args, ctx)`, which
    computes its `WriteIntent` itself. `validate(args)` checks the arguments as given before
    the schema does. `facts` says how the views show a call and whether it runs a command
    (`bubu.toolfacts.ToolFacts`; without it, the defaults).
    """
    if bare:  # tool(fn, effect=…): a function passed directly instead of decorated
        raise TypeError(
            "@tool needs an effect class: @tool(effect='read_only'), 'provable_write' (with "
            "target= and content=) or 'side_effecting'"
        )
    if effect not in get_args(EffectClass):
        raise TypeError(f"@tool effect {effect!r} is not one of {', '.join(get_args(EffectClass))}")
    declared = target is not None or content is not None
    if prepare is not None and declared:
        raise TypeError("@tool takes prepare= or target= and content=, not both")
    if effect == "provable_write" and prepare is None and (target is None or content is None):
        raise TypeError(
            "@tool(effect='provable_write') needs target= (the path) and content= (the bytes it "
            "will hold), or prepare= (the write's intent), so recovery can prove the outcome"
        )
    if path_arg is not None and declared:
        raise TypeError("target= names the path of the write already; path_arg= is not needed")
    if effect != "provable_write" and (declared or prepare is not None):
        raise TypeError("target=, content= and prepare= are for effect='provable_write' only")

    def wrap(f: Callable[P, R]) -> FunctionTool[P, R]:
        return FunctionTool(
            f,
            effect=effect,
            name=name,
            description=description,
            target=target,
            content=content,
            permission=permission,
            path_arg=path_arg,
            prepare=prepare,
            validate=validate,
            facts=facts,
        )

    return wrap


__all__ = ["FunctionTool", "json_schema", "parse_docstring", "tool"]
