"""`@tool`: schemas from type hints, the required effect class, provable writes and results."""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import pytest

from bubu.errors import ToolError
from bubu.tools import ToolContext, ToolResult, WriteIntent, atomic_write, builtin_tools
from bubu.tools.base import Tool
from bubu.tools.decorator import FunctionTool, parse_docstring, tool
from bubu.tools.restore import restore_tool
from bubu.tools.schema import Arguments


@tool(effect="read_only")
def search(
    query: str,
    *,
    limit: int = 10,
    ratio: float = 0.5,
    exact: bool = False,
    mode: Literal["fast", "full"] = "fast",
    tags: list[str] | None = None,
    weights: dict[str, float] | None = None,
    note: Annotated[str, "A free-form note."] = "",
) -> str:
    """Search the notes.

    Matches are ranked.

    Args:
        query: What to look for,
            over two lines.
        limit (int): At most this many.

    Returns:
        The matching lines.
    """
    return f"{query}|{limit}|{ratio}|{exact}|{mode}|{tags}|{weights}|{note}"


def test_the_schema_comes_from_the_type_hints() -> None:
    props = search.parameters["properties"]
    assert search.parameters["required"] == ["query"]
    assert search.parameters["additionalProperties"] is False
    assert props["query"] == {"type": "string", "description": "What to look for, over two lines."}
    assert props["limit"] == {"type": "integer", "description": "At most this many."}
    assert props["ratio"] == {"type": "number"}
    assert props["exact"] == {"type": "boolean"}
    assert props["mode"] == {"type": "string", "enum": ["fast", "full"]}
    assert props["tags"] == {
        "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]
    }
    assert props["weights"]["anyOf"][0] == {
        "type": "object",
        "additionalProperties": {"type": "number"},
    }
    assert props["note"] == {"type": "string", "description": "A free-form note."}


def test_the_docstring_is_the_description_without_its_args_section() -> None:
    assert (
        search.description
        == "Search the notes.\n\nMatches are ranked.\n\nReturns:\n    The matching lines."
    )
    assert search.name == "search"
    assert search.effect == "read_only"


def test_a_decorated_function_is_a_tool_and_still_callable() -> None:
    as_tool: Tool = search  # type-checks against the protocol
    assert as_tool.name == "search"
    assert search("x", limit=2) == "x|2|0.5|False|fast|None|None|"


def test_parse_docstring_reads_google_style_args() -> None:
    text, params = parse_docstring(
        """Do it.

        Arguments:
            a: First.
            b (str): Second,
                continued.
        Raises:
            ValueError: never.
        """
    )
    assert params == {"a": "First.", "b": "Second, continued."}
    assert text == "Do it.\n\nRaises:\n    ValueError: never."


def test_the_effect_class_is_required_at_decoration() -> None:
    with pytest.raises(TypeError, match="required keyword-only argument: 'effect'"):
        tool(lambda: "x")  # type: ignore[arg-type, call-arg]  # the mistake under test
    with pytest.raises(TypeError, match="needs an effect class"):
        tool(search.fn, effect="read_only")  # type: ignore[arg-type]  # the mistake under test
    with pytest.raises(TypeError, match="required keyword-only argument: 'effect'"):
        tool()  # type: ignore[call-arg]  # the mistake under test
    with pytest.raises(TypeError, match="is not one of"):
        tool(effect="harmless")  # type: ignore[arg-type]  # the mistake under test


def test_a_provable_write_must_declare_target_and_content() -> None:
    with pytest.raises(TypeError, match=r"needs target= .* and content="):
        tool(effect="provable_write")
    with pytest.raises(TypeError, match="provable_write' only"):
        tool(effect="read_only", target=lambda a: "x")


def test_unsupported_signatures_fail_at_decoration() -> None:
    def untyped(x):  # type: ignore[no-untyped-def]  # the mistake under test
        return x

    def varargs(*xs: str) -> str:
        return ""

    def objects(x: object) -> str:
        return ""

    for fn, message in (
        (untyped, "needs a type hint"),
        (varargs, "plain or keyword parameter"),
        (objects, "has no JSON form"),
    ):
        with pytest.raises(TypeError, match=message):
            tool(effect="read_only")(fn)
    with pytest.raises(TypeError, match="tool name"):
        tool(effect="read_only", name="two words")(search.fn)


def _ctx(ws: Path) -> ToolContext:
    return ToolContext(workspace=ws)


def test_arguments_are_checked_before_the_function_runs(ws: Path) -> None:
    ctx = _ctx(ws)
    assert search.run({"query": "q", "mode": "full", "tags": ["a"]}, ctx, None).output == (
        "q|10|0.5|False|full|['a']|None|"
    )
    bad: list[tuple[dict[str, object], str]] = [
        ({}, "missing required argument query"),
        ({"query": "q", "other": 1}, "unknown argument 'other'"),
        ({"query": 3}, "argument 'query' must be a string, not a number"),
        ({"query": "q", "limit": True}, "argument 'limit' must be an integer, not a boolean"),
        ({"query": "q", "mode": "slow"}, 'one of "fast", "full"'),
        (
            {"query": "q", "tags": ["a", 1]},
            "argument 'tags' does not fit its schema (tags[1]: expected string, got integer)",
        ),
    ]
    for args, message in bad:
        result = search.run(args, ctx, None)
        assert result.is_error, args
        assert message in result.output
    assert search.run({"query": "q", "ratio": 1}, ctx, None).output.startswith("q|10|1|")


def test_results_exceptions_and_context(ws: Path) -> None:
    @tool(effect="side_effecting")
    def shape(kind: str, ctx: ToolContext) -> object:
        """Return things of various shapes."""
        match kind:
            case "result":
                return ToolResult(output="custom", is_error=True)
            case "none":
                return None
            case "data":
                return {"workspace": ctx.workspace.name, "n": [1, 2]}
            case "tool_error":
                raise ToolError("a message for the model")
            case _:
                raise KeyError(kind)

    ctx = _ctx(ws)
    assert "ctx" not in shape.parameters["properties"]
    assert shape.run({"kind": "result"}, ctx, None) == ToolResult(output="custom", is_error=True)
    assert shape.run({"kind": "none"}, ctx, None) == ToolResult(output="")
    assert shape.run({"kind": "data"}, ctx, None).output == '{"workspace": "ws", "n": [1, 2]}'
    assert shape.run({"kind": "tool_error"}, ctx, None) == ToolResult(
        output="a message for the model", is_error=True
    )
    assert shape.run({"kind": "boom"}, ctx, None) == ToolResult(
        output="shape failed: KeyError: 'boom'", is_error=True
    )


def test_an_async_function_runs_to_completion(ws: Path) -> None:
    @tool(effect="read_only")
    async def later(x: int) -> str:
        """Answer later."""
        return str(x * 2)

    assert later.run({"x": 21}, _ctx(ws), None).output == "42"


def test_permission_asks_for_a_write_outside_and_when_declared(ws: Path) -> None:
    @tool(
        effect="side_effecting", permission=lambda a: "it deploys" if a["env"] == "prod" else None
    )
    def deploy(env: str) -> str:
        """Deploy."""
        return env

    ctx = _ctx(ws)
    assert deploy.permission({"env": "prod"}, ctx) == "it deploys"
    assert deploy.permission({"env": "test"}, ctx) is None
    assert note_tool().permission({"title": "../../x", "text": ""}, ctx) is not None
    assert note_tool().permission({"title": "x", "text": ""}, ctx) is None


# ---- provable writes ----------------------------------------------------------------------------


def note_tool(mode: str = "leave", calls: list[str] | None = None) -> FunctionTool[..., Any]:
    """A provable write of notes/TITLE.md; `mode` says what the function itself does."""

    def body(title: str, text: str, ctx: ToolContext) -> str:
        """Save a note."""
        if calls is not None:
            calls.append(title)
        path = ctx.workspace / "notes" / f"{title}.md"
        if mode == "write":
            atomic_write(str(path), text.encode(), None)
        elif mode == "wrong":
            atomic_write(str(path), b"something else", None)
        elif mode == "fail":
            raise RuntimeError("disk on fire")
        return "" if mode == "silent" else f"noted {title}"

    return tool(
        effect="provable_write",
        name="note",
        target=lambda a: f"notes/{a['title']}.md",
        content=lambda a: a["text"],
    )(body)


def test_prepare_records_the_hashes_before_and_after(ws: Path) -> None:
    ctx = _ctx(ws)
    intent = note_tool().prepare({"title": "a", "text": "hello"}, ctx)
    assert intent is not None
    assert intent.path == str(ws / "notes" / "a.md")
    assert intent.before_sha256 is None
    assert intent.after_sha256 == hashlib.sha256(b"hello").hexdigest()
    assert intent.content == b"hello"
    with pytest.raises(ToolError, match="outside the workspace"):
        note_tool().prepare({"title": "../../escape", "text": ""}, ctx)
    with pytest.raises(ToolError, match="missing required argument"):
        note_tool().prepare({"title": "a"}, ctx)


@pytest.mark.parametrize("mode", ["leave", "write", "silent"])
def test_a_provable_write_ends_with_the_declared_content(ws: Path, mode: str) -> None:
    ctx = _ctx(ws)
    t = note_tool(mode)
    args = {"title": "a", "text": "hello"}
    result = t.run(args, ctx, t.prepare(args, ctx))
    assert result == ToolResult(output="wrote notes/a.md." if mode == "silent" else "noted a")
    assert (ws / "notes" / "a.md").read_bytes() == b"hello"


def test_a_provable_write_that_strays_or_fails_is_an_error(ws: Path) -> None:
    ctx = _ctx(ws)
    args = {"title": "a", "text": "hello"}
    wrong = note_tool("wrong")
    result = wrong.run(args, ctx, wrong.prepare(args, ctx))
    assert result.is_error
    assert "other than it declared" in result.output
    (ws / "notes" / "a.md").unlink()
    failing = note_tool("fail")
    result = failing.run(args, ctx, failing.prepare(args, ctx))
    assert result == ToolResult(output="note failed: RuntimeError: disk on fire", is_error=True)
    assert not (ws / "notes" / "a.md").exists()  # a failed function writes nothing


def test_a_provable_write_checks_the_file_again_when_it_runs(ws: Path) -> None:
    ctx = _ctx(ws)
    calls: list[str] = []
    t = note_tool(calls=calls)
    args = {"title": "a", "text": "hello"}
    intent = t.prepare(args, ctx)
    (ws / "notes").mkdir()
    (ws / "notes" / "a.md").write_text("hello")
    assert (
        t.run(args, ctx, intent).output
        == "notes/a.md already has the intended content; nothing to do."
    )
    (ws / "notes" / "a.md").write_text("changed meanwhile")
    result = t.run(args, ctx, intent)
    assert result.is_error
    assert "changed since this call was prepared" in result.output
    assert calls == []


def test_bad_targets_and_failing_declarations_refuse_the_call(ws: Path) -> None:
    ctx = _ctx(ws)
    (ws / "notes" / "dir.md").mkdir(parents=True)
    with pytest.raises(ToolError, match="not a regular file"):
        note_tool().prepare({"title": "dir", "text": "x"}, ctx)
    locked = ws / "notes" / "locked.md"
    locked.write_text("x")
    locked.chmod(0o444)
    with pytest.raises(ToolError, match="read-only"):
        note_tool().prepare({"title": "locked", "text": "y"}, ctx)

    @tool(effect="side_effecting", permission=lambda a: str(1 // 0))
    def risky() -> str:
        """Risky."""
        return "ran"

    with pytest.raises(ToolError, match="permission= declaration failed: ZeroDivisionError"):
        risky.permission({}, ctx)

    @tool(effect="provable_write", target=lambda a: a["missing"], content=lambda a: b"")
    def lost(path: str) -> str:
        """Lost."""
        return "ran"

    with pytest.raises(ToolError, match="target= declaration failed: KeyError"):
        lost.prepare({"path": "x"}, ctx)
    assert lost.permission({"path": "x"}, ctx) is None  # prepare refuses it, so nothing runs


# ---- nested argument types ----------------------------------------------------------------------


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


class Step(msgspec.Struct, forbid_unknown_fields=True):
    text: str
    done: bool = False
    owner: str | None = None


@tool(effect="read_only")
def schedule(steps: list[Step], priority: Priority = Priority.LOW, note: str | None = None) -> str:
    """Schedule steps.

    Args:
        steps: What to do, in order.
    """
    return "|".join(f"{s.text}:{s.done}:{s.owner}" for s in steps) + f"|{priority.value}|{note}"


def test_nested_types_have_a_closed_schema() -> None:
    props = schedule.parameters["properties"]
    assert props["steps"] == {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "text": {"type": "string"},
                "done": {"type": "boolean"},
                "owner": {"type": ["string", "null"]},
            },
            "required": ["text"],
            "additionalProperties": False,
        },
        "description": "What to do, in order.",
    }
    assert props["priority"] == {"type": "string", "enum": ["low", "high"]}
    assert schedule.parameters["required"] == ["steps"]


def test_nested_arguments_are_validated_and_reach_the_function_typed(ws: Path) -> None:
    ctx = _ctx(ws)
    ok = schedule.run(
        {"steps": [{"text": "a"}, {"text": "b", "done": True, "owner": "me"}], "priority": "high"},
        ctx,
        None,
    )
    assert ok == ToolResult(output="a:False:None|b:True:me|high|None")
    bad: list[tuple[dict[str, object], str | None]] = [
        (
            {"steps": [{"text": "a", "done": "yes"}]},
            "argument 'steps' does not fit its schema "
            "(steps[0].done: expected boolean, got string)",
        ),
        ({"steps": [{"done": True}]}, "(steps[0]: missing field text)"),
        ({"steps": [{"text": "a", "when": 1}]}, "(steps[0]: unknown field when)"),
        ({"steps": [{"text": "a", "owner": 7}]}, "(steps[0].owner: expected string or null"),
        ({"steps": []}, None),
        ({"steps": [], "priority": "urgent"}, 'argument \'priority\' must be one of "low", "high"'),
        ({"steps": [], "note": 3}, "argument 'note' must be a string or null, not a number"),
        ({"steps": "a"}, "argument 'steps' must be an array, not a string"),
    ]
    for args, message in bad:
        result = schedule.run(args, ctx, None)
        if message is None:
            assert not result.is_error, result.output
            continue
        assert result.is_error, args
        assert message in result.output, result.output
        assert "\n" not in result.output


# ---- the options the built-in tools are declared with ------------------------------------------


class Tally(Arguments):
    """The arguments of `tally`, taken as one Struct."""

    path: Annotated[str, "A file of the workspace."]
    unit: Annotated[Literal["words", "lines"], "What to count."] = "words"
    at_least: Annotated[int, msgspec.Meta(ge=1)] = 1


WHOLE = Tally(path=".")


@tool(effect="read_only", name="tally", path_arg="path")
def tally(args: Tally, ctx: ToolContext) -> str:
    """Count the words or lines of a file."""
    text = (ctx.workspace / args.path).read_text()
    n = len(text.split() if args.unit == "words" else text.splitlines())
    return f"{n} {args.unit}" if n >= args.at_least else "too few"


def test_an_arguments_struct_is_the_whole_argument_list(ws: Path) -> None:
    assert tally.parameters == {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "A file of the workspace."},
            # The description right after the type, as the built-in definitions are sent.
            "unit": {"type": "string", "description": "What to count.", "enum": ["words", "lines"]},
            "at_least": {"type": "integer"},
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    ctx = _ctx(ws)
    assert tally.run({"path": "a.txt"}, ctx, None) == ToolResult(output="1 words")
    assert tally.run({"path": "a.txt", "unit": "lines", "at_least": 2}, ctx, None).output == (
        "too few"
    )
    for args, message in (
        ({"path": "a.txt", "unit": "chars"}, 'argument \'unit\' must be one of "words", "lines"'),
        ({"path": "a.txt", "at_least": 0}, "argument 'at_least' must be at least 1, not 0"),
        ({"unit": "words"}, "missing required argument path"),
        ({"path": "a.txt", "args": {}}, "unknown argument 'args'; expected one of path, unit"),
    ):
        result = tally.run(args, ctx, None)
        assert result.is_error
        assert message in result.output, result.output

    def defaulted(args: Tally = WHOLE) -> str:
        return ""

    with pytest.raises(TypeError, match="takes no default"):
        tool(effect="read_only")(defaulted)


def test_a_path_argument_asks_outside_orders_calls_and_must_exist(ws: Path) -> None:
    ctx = _ctx(ws)
    reason = tally.permission({"path": "../elsewhere.txt"}, ctx)
    assert reason is not None
    assert "outside the workspace" in reason
    assert tally.permission({"path": "a.txt"}, ctx) is None
    assert tally.touches({"path": "./a.txt"}, ctx) == str(ws / "a.txt")
    with pytest.raises(TypeError, match="path_arg='file' names no argument"):
        tool(effect="read_only", path_arg="file")(tally.fn)

    @tool(effect="read_only", path_arg="path", permission=lambda a: None)
    def anywhere(path: str) -> str:
        """Decides for itself."""
        return path

    assert anywhere.permission({"path": "../elsewhere.txt"}, ctx) is None


def test_permission_naming_an_argument_asks_for_every_call(ws: Path) -> None:
    @tool(effect="side_effecting", permission="query")
    def lookup(query: str) -> str:
        """Look something up."""
        return query

    ctx = _ctx(ws)
    assert lookup.permission({"query": "who is there"}, ctx) == "who is there"
    assert lookup.permission({}, ctx) == "lookup (no query given)"
    assert lookup.permission({"query": 3}, ctx) == "lookup (no query given)"


def test_validate_speaks_before_the_schema(ws: Path) -> None:
    def no_shouting(args: Mapping[str, Any]) -> None:
        if isinstance(args.get("text"), str) and args["text"].isupper():
            raise ToolError("the text is all capitals; write it normally")

    @tool(effect="read_only", validate=no_shouting)
    def echo(text: str, times: int = 1) -> str:
        """Echo."""
        return text * times

    ctx = _ctx(ws)
    assert echo.run({"text": "ab", "times": 2}, ctx, None).output == "abab"
    assert echo.run({"text": "AB", "times": "x"}, ctx, None) == ToolResult(
        output="the text is all capitals; write it normally", is_error=True
    )
    assert (
        "argument 'times' must be an integer"
        in echo.run({"text": "ab", "times": "x"}, ctx, None).output
    )


def _stamp_intent(args: Mapping[str, Any], ctx: ToolContext) -> WriteIntent:
    path = ctx.workspace / args["name"]
    before = path.read_bytes() if path.exists() else None
    after = f"{args['text']}\n".encode()
    return WriteIntent(
        path=str(path),
        before_sha256=None if before is None else hashlib.sha256(before).hexdigest(),
        after_sha256=hashlib.sha256(after).hexdigest(),
        content=after,
        before=before,
    )


@tool(effect="provable_write", path_arg="name", prepare=_stamp_intent)
def stamp(name: str, text: str, intent: WriteIntent) -> str:
    """Write a stamp file, exactly as prepared."""
    atomic_write(intent.path, intent.content, None)
    return f"stamped {name}"


def test_a_provable_write_may_prepare_its_own_intent(ws: Path) -> None:
    ctx = _ctx(ws)
    args = {"name": "s.txt", "text": "hi"}
    intent = stamp.prepare(args, ctx)
    assert intent is not None
    assert intent.path == str(ws / "s.txt")
    assert intent.before_sha256 is None
    assert intent.after_sha256 == hashlib.sha256(b"hi\n").hexdigest()
    assert not (ws / "s.txt").exists()  # preparing writes nothing
    assert stamp.run(args, ctx, intent) == ToolResult(output="stamped s.txt")
    assert (ws / "s.txt").read_bytes() == b"hi\n"
    # Run without a prepared intent: it is prepared first, from the file as it is now.
    assert stamp.run({"name": "s.txt", "text": "again"}, ctx, None).output == "stamped s.txt"
    assert (ws / "s.txt").read_bytes() == b"again\n"
    with pytest.raises(ToolError, match="missing required argument text"):
        stamp.prepare({"name": "s.txt"}, ctx)

    def broken(args: Mapping[str, Any], ctx: ToolContext) -> WriteIntent:
        raise FileNotFoundError(2, "No such file or directory", "gone.txt")

    failing = tool(effect="provable_write", prepare=broken)(stamp.fn)
    with pytest.raises(ToolError, match=r"gone\.txt: no such file or directory"):
        failing.prepare(args, ctx)
    assert failing.run(args, ctx, None) == ToolResult(
        output="gone.txt: no such file or directory", is_error=True
    )


def test_prepare_is_declared_with_a_provable_write_only() -> None:
    with pytest.raises(TypeError, match="prepare= or target= and content=, not both"):
        tool(effect="provable_write", prepare=_stamp_intent, target=lambda a: "x")
    with pytest.raises(TypeError, match="provable_write' only"):
        tool(effect="read_only", prepare=_stamp_intent)
    with pytest.raises(TypeError, match="a WriteIntent parameter is for a tool with prepare="):
        tool(effect="side_effecting")(stamp.fn)
    with pytest.raises(TypeError, match="path_arg= is not needed"):
        tool(effect="provable_write", path_arg="p", target=lambda a: "x", content=lambda a: "")


def test_the_built_in_tools_are_declared_with_tool() -> None:
    tools = builtin_tools()
    assert all(isinstance(t, FunctionTool) for t in tools.values()), tools
    assert isinstance(restore_tool(lambda sha: None), FunctionTool)
