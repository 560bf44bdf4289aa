"""The providers' own tool shapes, mapped onto Bubu's tools (pure: no I/O).

Anthropic's models are tuned for the client tools the Messages API defines — the text editor
(``text_editor_20250728``, named ``str_replace_based_edit_tool``) and bash (``bash_20250124``) —
and OpenAI's for the Responses API's ``apply_patch`` (V4A diffs) and ``shell``. Where Bubu talks
to the provider itself, it offers its file and command tools in those shapes. A native call is
turned into a call of the Bubu tool with the same effect, the model's own block kept beside it
(`ToolCallPart.native`), so permissions, the sandbox, protected paths, dispatch records and
recovery are the ones every call has; the request replays the native block verbatim and sends
the result in the shape the provider documents.

    text editor view         read_file            read-only
    text editor create       write_file           provable write
    text editor str_replace  edit_file            provable write
    text editor insert       insert_text          provable write
    bash                     run_command          side-effecting
    apply_patch_call         apply_patch          provable write, one file per call
    shell_call               run_command          side-effecting

A native call Bubu cannot carry out (an unknown command, missing fields, a bash restart) becomes
a `tool_reply` call, which runs nothing and answers the model in one line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

from bubu.messages import (
    JSON,
    AssistantMessage,
    ModelRequest,
    ToolCallPart,
    ToolResultPart,
    ToolSpec,
)

Item: TypeAlias = dict[str, Any]

TEXT_EDITOR_TYPE = "text_editor_20250728"
TEXT_EDITOR = "str_replace_based_edit_tool"
BASH_TYPE = "bash_20250124"
BASH = "bash"
TOOL_REPLY = "tool_reply"
FILE_TOOLS = ("read_file", "write_file", "edit_file")
WRITE_TOOLS = ("write_file", "edit_file")
COMMAND_TOOL = "run_command"

Mapped: TypeAlias = tuple[str, dict[str, JSON]]


def _reply(message: str, *, error: bool = True) -> Mapped:
    return TOOL_REPLY, {"message": message, "error": error}


def _offers(specs: Iterable[ToolSpec], names: Iterable[str], native: str) -> bool:
    """Whether `specs` hold every tool of `names`, and no tool of its own named `native` (a
    plugin's tool that would clash with the provider's)."""
    have = {s.name for s in specs}
    return all(n in have for n in names) and native not in have


# ---- Anthropic: the text editor and bash --------------------------------------------------------


def anthropic_tools(specs: tuple[ToolSpec, ...]) -> tuple[list[Item], tuple[ToolSpec, ...]]:
    """The native tools to offer for `specs`, and the specs still offered as JSON-schema tools."""
    native: list[Item] = []
    dropped: set[str] = set()
    if _offers(specs, FILE_TOOLS, TEXT_EDITOR):
        native.append({"type": TEXT_EDITOR_TYPE, "name": TEXT_EDITOR})
        dropped.update(FILE_TOOLS)
    if _offers(specs, (COMMAND_TOOL,), BASH):
        native.append({"type": BASH_TYPE, "name": BASH})
        dropped.add(COMMAND_TOOL)
    return native, tuple(s for s in specs if s.name not in dropped)


def from_anthropic(name: str, given: Mapping[str, JSON]) -> Mapped | None:
    """The Bubu call for a native Anthropic tool call (None: `name` is no native tool)."""
    if name == TEXT_EDITOR:
        return _text_editor(given)
    if name == BASH:
        if given.get("restart"):
            return _reply(
                "the shell was restarted: every command runs in a fresh shell in the workspace",
                error=False,
            )
        command = given.get("command")
        if not isinstance(command, str):
            return _reply("bash needs a command (a string), or restart: true")
        return COMMAND_TOOL, {"command": command}
    return None


def _text_editor(given: Mapping[str, JSON]) -> Mapped:
    command, path = given.get("command"), given.get("path")
    if not isinstance(path, str):
        return _reply(f"the text editor's {command or 'call'} needs a path (a string)")
    match command:
        case "view":
            return "read_file", {"path": path, **_view_range(given.get("view_range"))}
        case "create":
            text = given.get("file_text")
            if not isinstance(text, str):
                return _reply("create needs file_text (the whole content of the file)")
            return "write_file", {"path": path, "content": text}
        case "str_replace":
            old, new = given.get("old_str"), given.get("new_str", "")
            if not isinstance(old, str) or not isinstance(new, str):
                return _reply("str_replace needs old_str and new_str (strings)")
            return "edit_file", {"path": path, "old": old, "new": new}
        case "insert":
            text = given.get("insert_text", given.get("new_str"))
            line = given.get("insert_line")
            if not isinstance(text, str) or not isinstance(line, int) or isinstance(line, bool):
                return _reply("insert needs insert_line (a number) and insert_text (a string)")
            return "insert_text", {"path": path, "insert_line": line, "text": text}
        case _:
            return _reply(
                f"the text editor has no command {command!r}; use view, create, str_replace "
                "or insert"
            )


def _view_range(given: JSON) -> dict[str, JSON]:
    if not (isinstance(given, list) and len(given) == 2 and all(isinstance(n, int) for n in given)):
        return {}
    start, end = max(1, given[0]), given[1]
    if end == -1:
        return {"offset": start}
    return {"offset": start, "limit": max(1, end - start + 1)}


def anthropic_call(part: ToolCallPart) -> Item | None:
    """The native tool_use block to replay for `part` (None: it was a JSON-schema tool call)."""
    native = part.native
    if isinstance(native, dict) and native.get("type") == "tool_use":
        return {**native, "id": part.call_id}
    return None


# ---- OpenAI Responses: apply_patch and shell ----------------------------------------------------

APPLY_PATCH_CALL = "apply_patch_call"
SHELL_CALL = "shell_call"


def responses_tools(specs: tuple[ToolSpec, ...]) -> tuple[list[Item], tuple[ToolSpec, ...]]:
    """The native tools to offer for `specs`, and the specs still offered as function tools."""
    native: list[Item] = []
    dropped: set[str] = set()
    if _offers(specs, WRITE_TOOLS, "apply_patch"):
        native.append({"type": "apply_patch"})
        dropped.update(WRITE_TOOLS)
    if _offers(specs, (COMMAND_TOOL,), "shell"):
        # Run here, by Bubu: without a local environment the server may run it in its own.
        native.append({"type": "shell", "environment": {"type": "local"}})
        dropped.add(COMMAND_TOOL)
    return native, tuple(s for s in specs if s.name not in dropped)


def from_responses(item: Mapping[str, JSON]) -> Mapped | None:
    """The Bubu call for a native Responses output item (None: it is no native tool call)."""
    match item.get("type"):
        case "apply_patch_call":
            op = item.get("operation")
            if not isinstance(op, dict) or not isinstance(op.get("path"), str):
                return _reply("the apply_patch call names no operation with a path")
            kind = op.get("type")
            if kind not in ("create_file", "update_file", "delete_file"):
                return _reply(f"apply_patch has no operation {kind!r}")
            args: dict[str, JSON] = {"path": op["path"], "operation": kind}
            if kind != "delete_file":
                args["diff"] = op.get("diff") if isinstance(op.get("diff"), str) else ""
            return "apply_patch", args
        case "shell_call":
            action = item.get("action")
            commands = action.get("commands") if isinstance(action, dict) else None
            if not isinstance(commands, list) or not commands:
                return _reply("the shell call holds no commands")
            if not all(isinstance(c, str) for c in commands):
                return _reply("the shell call's commands must be strings")
            out: dict[str, JSON] = {"command": "\n".join(commands)}
            timeout = action.get("timeout_ms") if isinstance(action, dict) else None
            if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0:
                out["timeout_s"] = timeout / 1000
            return COMMAND_TOOL, out
        case _:
            return None


def responses_call(part: ToolCallPart) -> Item | None:
    """The native output item to replay for `part` (None: it was a function call)."""
    native = part.native
    if isinstance(native, dict) and native.get("type") in (APPLY_PATCH_CALL, SHELL_CALL):
        return {**native, "call_id": part.call_id}
    return None


def native_calls(request: ModelRequest) -> dict[str, Item]:
    """The native call items of `request`'s history by call id (their results answer in kind)."""
    found: dict[str, Item] = {}
    for message in request.messages:
        if isinstance(message, AssistantMessage):
            for p in message.parts:
                if isinstance(p, ToolCallPart) and isinstance(p.native, dict):
                    found[p.call_id] = p.native
    return found


_EXIT = re.compile(r"^exit code (-?\d+)")
_SIGNAL = re.compile(r"^killed by signal (\d+)")


def responses_result(result: ToolResultPart, call: Mapping[str, JSON]) -> Item | None:
    """`result` as the output item its native call is answered with (None: a function call)."""
    match call.get("type"):
        case "apply_patch_call":
            return {
                "type": "apply_patch_call_output",
                "call_id": result.call_id,
                "status": "failed" if result.is_error else "completed",
                "output": result.content,
            }
        case "shell_call":
            action = call.get("action")
            cap = action.get("max_output_length") if isinstance(action, dict) else None
            item: Item = {
                "type": "shell_call_output",
                "call_id": result.call_id,
                "output": [_shell_output(result, cap if isinstance(cap, int) else None)],
            }
            if isinstance(cap, int):
                item["max_output_length"] = cap
            return item
        case _:
            return None


def _shell_output(result: ToolResultPart, cap: int | None) -> Item:
    """One command's stdout, stderr and outcome, read from run_command's result: its output,
    then a last line that says how it ended (``exit code N``, ``timed out after …``)."""
    body, _, last = result.content.rpartition("\n")
    outcome: Item
    if last.startswith(("timed out", "stopped after")):
        outcome = {"type": "timeout"}
    elif (m := _EXIT.match(last)) is not None:
        outcome = {"type": "exit", "exit_code": int(m.group(1))}
    elif (m := _SIGNAL.match(last)) is not None:
        outcome = {"type": "exit", "exit_code": 128 + int(m.group(1))}
    else:  # the command did not run (refused, not permitted): say why on stderr
        outcome = {"type": "exit", "exit_code": 1 if result.is_error else 0}
        return {"stdout": "", "stderr": _capped(result.content, cap), "outcome": outcome}
    if body == "(no output)":
        body = ""
    return {"stdout": _capped(body, cap), "stderr": "", "outcome": outcome}


def _capped(text: str, cap: int | None) -> str:
    return text if cap is None or len(text) <= cap else text[:cap]


__all__ = [
    "BASH",
    "TEXT_EDITOR",
    "TOOL_REPLY",
    "anthropic_call",
    "anthropic_tools",
    "from_anthropic",
    "from_responses",
    "native_calls",
    "responses_call",
    "responses_result",
    "responses_tools",
]
