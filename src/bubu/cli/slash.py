"""The slash commands of `bubu chat`: each a thin call of what a `bubu` command does, on the
chat's session (most invoke that very command in-process)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import click
from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

from bubu.cli.app import cli
from bubu.errors import BubuError

if TYPE_CHECKING:
    from bubu.cli.chat import Chat

Handler = Callable[["Chat", str], str | None]

COMMANDS: dict[str, tuple[str, str]] = {
    "/help": ("", "the commands and keys"),
    "/status": ("", "the session's state, usage, plan and notice (bubu status)"),
    "/cost": ("", "what the session's model calls cost, per model"),
    "/context": ("", "the next model request and what became of each event (bubu context)"),
    "/compact": ("", "summarize the older events into a checkpoint now (bubu compact)"),
    "/plan": ("[show]", "plan mode: the next turns only read and plan; show shows the plan"),
    "/approve": ("[message]", "approve the plan: the session acts on it from now on"),
    "/model": ("[provider:model]", "show the model, or use another from the next message on"),
    "/fork": ("[SEQ]", "go on in a copy of the log up to SEQ, default all (bubu fork)"),
    "/rewind": ("[SEQ]", "go back to SEQ, default before the last message (bubu rewind)"),
    "/undo": ("", "revert the last turn, what its commands did too (bubu undo)"),
    "/stop": ("", "stop the turn running in another process (bubu stop)"),
    "/resume": ("", "continue a stopped, suspended or crashed turn (bubu resume)"),
    "/dismiss": ("", "dismiss the recovery notice (bubu dismiss)"),
    "/exit": ("", "leave (the session stays: bubu chat -c continues it)"),
}

KEYS = (
    ("Enter", "send the message"),
    ("Alt-Enter or \\ at the end", "a new line (pasted lines stay lines)"),
    ("Tab", "complete a slash command or an @path"),
    ("@path", "give the model that workspace file with the message (read_file)"),
    ("Up / Down", "the history"),
    ("Ctrl-C", "stop the running turn; at the prompt clear the line, twice leave"),
    ("Ctrl-D", "leave (on an empty line)"),
)


class SlashCompleter(Completer):
    """Completes a slash command at the start of the prompt (and the prompt files' `/NAME`s of
    `workspace`, when given)."""

    def __init__(self, workspace: str | None = None) -> None:
        self.workspace = workspace

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        """The commands that begin with what was typed (before any space)."""
        text = document.text_before_cursor
        if not text.startswith("/") or " " in text or "\n" in text:
            return
        for name, (_, what) in {**prompt_commands(self.workspace), **COMMANDS}.items():
            if name.startswith(text):
                yield Completion(name, start_position=-len(text), display_meta=what)


def prompt_commands(workspace: str | None) -> dict[str, tuple[str, str]]:
    """The prompt files' commands of `workspace` (and $BUBU_HOME), as `COMMANDS` lists its own;
    a prompt file never hides a built-in command."""
    if workspace is None:
        return {}
    from bubu.engine.extensions import prompt_files

    out: dict[str, tuple[str, str]] = {}
    for name, p in prompt_files(workspace).items():
        if f"/{name}" not in COMMANDS:
            where = "yours" if p.origin == "user" else "this workspace's"
            out[f"/{name}"] = (p.argument_hint, p.description or f"the prompt file {where}")
    return out


def run_slash(chat: Chat, line: str) -> str | None:
    """Run one slash command; "exit" when the chat should end."""
    name, _, arg = line.partition(" ")
    name = {"/quit": "/exit", "/?": "/help"}.get(name.lower(), name.lower())
    handler = _HANDLERS.get(name)
    try:
        if handler is None:
            _prompt_file(chat, name, line)
            return None
        return "exit" if handler(chat, arg.strip()) == "exit" else None
    except BubuError as e:
        chat.error(str(e))
    except click.ClickException as e:
        chat.error(e.format_message())
    return None


def _prompt_file(chat: Chat, name: str, line: str) -> None:
    """`/NAME ARGS` of a prompt file: its prompt sent as the next message."""
    from bubu.cli.prompts import find

    files = prompt_commands(chat.workspace)
    if name not in files:
        more = f"; the prompt files: {' '.join(files)}" if files else ""
        chat.say(f"unknown command {name}; the commands are " + " ".join(COMMANDS) + more)
        return
    prepared = find(line, chat.workspace)
    if prepared is not None:
        chat.prompt_turn(prepared)


def invoke(chat: Chat, *args: str) -> int:
    """Run `bubu ARGS` in this process, on the chat's database; its exit status."""
    argv = [*(["--db", chat.ctx.db] if chat.ctx.db else []), *args]
    try:
        cli.main(args=argv, prog_name="bubu", standalone_mode=False)
    except SystemExit as e:  # `fail` printed its one line
        return e.code if isinstance(e.code, int) else 1
    except click.exceptions.Abort:
        chat.say("aborted")
        return 130
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except BubuError as e:
        chat.error(str(e))
        return e.exit_code
    return 0


def _session(chat: Chat) -> str | None:
    if chat.info is None:
        chat.say("there is no session yet: send a message first")
        return None
    return chat.info.id


def _help(chat: Chat, _: str) -> None:
    for name, (args, what) in COMMANDS.items():
        chat.say(f"  {(name + ' ' + args).strip():<32} {what}")
    files = prompt_commands(chat.workspace)
    if files:
        chat.say("prompt files:")
    for name, (args, what) in files.items():
        chat.say(f"  {(name + ' ' + args).strip():<32} {what}")
    chat.say("keys:")
    for key, what in KEYS:
        chat.say(f"  {key:<32} {what}")


def _on_session(command: str, *extra: str) -> Handler:
    def run(chat: Chat, _: str) -> None:
        sid = _session(chat)
        if sid is not None:
            invoke(chat, command, sid, *extra)

    return run


def _cost(chat: Chat, _: str) -> None:
    from bubu.cli.readviews import cost_lines, status_dict

    sid = _session(chat)
    if sid is not None:
        chat.say(cost_lines(status_dict(chat.store, chat.store.session(sid))["usage"]))


def _plan(chat: Chat, arg: str) -> None:
    from dataclasses import replace

    from bubu.cli.readviews import plan_text
    from bubu.projections.memory import fold_plan, plan_json

    if arg != "show":
        chat.host.config = replace(chat.host.config, plan=True)
        chat.say(
            "plan mode: the next turns read and plan, nothing is written or run; "
            "/approve lets the session act on the plan"
        )
    if chat.info is None:
        return
    plan = plan_json(fold_plan(chat.store.read(chat.info.id)))
    chat.say(plan_text(plan) if plan else "  no plan yet (the model keeps one with update_plan)")


def _approve(chat: Chat, arg: str) -> None:
    from dataclasses import replace

    from bubu.engine.session import APPROVED, start_turn

    sid = _session(chat)
    if sid is None:
        return
    chat.host.config = replace(chat.host.config, plan=False)
    info = chat.store.session(sid)
    chat.drive(lambda: start_turn(chat.host, info, arg or APPROVED, approve_plan=True))


def _compact(chat: Chat, _: str) -> None:
    from bubu.cli.compactcmd import report
    from bubu.engine.compacting import compact_now

    sid = _session(chat)
    if sid is None:
        return
    info = chat.store.session(sid)
    with chat.host.runner_for(info) as runner:
        note = compact_now(runner)
    report(info, note)


def _model(chat: Chat, arg: str) -> None:
    from bubu.cli.agentcmds import make_host

    if not arg:
        chat.say(f"model {chat.model} (/model provider:model changes it)")
        return
    opts = {**chat.opts, "model": arg}
    chat.host = make_host(chat.store, arg, opts, chat.view)  # a bad spec fails here, in one line
    chat.opts, chat.model = opts, arg
    chat.say(f"model {arg} from the next message on")


def _seq(chat: Chat, arg: str, default: int) -> int | None:
    if not arg:
        return default
    try:
        return int(arg)
    except ValueError:
        chat.error(f"{arg!r} is not a seq; give the number of an event (`bubu log` lists them)")
        return None


def _fork(chat: Chat, arg: str) -> None:
    from bubu.engine.fork import fork_session

    sid = _session(chat)
    if sid is None:
        return
    at = _seq(chat, arg, chat.store.head(sid).high_water)
    if at is None:
        return
    fork = fork_session(chat.store, sid, at)
    chat.info = chat.store.session(fork.session)
    chat.say(
        f"forked {sid} at seq {at}: this chat goes on in {fork.session} "
        f"(`bubu chat --session {sid}` returns to the original)"
    )


def _before_last_message(chat: Chat, sid: str) -> int:
    from bubu.events import Text

    records = chat.store.read(sid)
    asked = [r.seq for r in records if r.event.role == "user" and isinstance(r.event.content, Text)]
    return max(asked[-1] - 1, 1) if asked else records[-1].seq


def _rewind(chat: Chat, arg: str) -> None:
    sid = _session(chat)
    if sid is None:
        return
    at = _seq(chat, arg, _before_last_message(chat, sid))
    if at is None:
        return
    before = {s.id for s in chat.store.sessions()}
    if invoke(chat, "rewind", sid, "--to", str(at)) != 0:
        return
    made = [s for s in chat.store.sessions() if s.id not in before]
    if len(made) == 1:  # the rewound log goes on in a session of its own: so does the chat
        chat.info = made[0]
        chat.say(f"this chat goes on in {made[0].id}")


def _undo(chat: Chat, _: str) -> None:
    sid = _session(chat)
    if sid is None:
        return
    before = {s.id for s in chat.store.sessions()}
    if invoke(chat, "undo", sid) != 0:
        return
    made = [s for s in chat.store.sessions() if s.id not in before]
    if len(made) == 1:  # the undone log goes on in a session of its own: so does the chat
        chat.info = made[0]
        chat.say(f"this chat goes on in {made[0].id}")


def _resume(chat: Chat, _: str) -> None:
    from bubu.engine.recovery import needs_recovery, recover_session
    from bubu.engine.session import resume_turn

    sid = _session(chat)
    if sid is None:
        return
    info = chat.store.session(sid)
    if needs_recovery(chat.store, info):
        chat.drive(lambda: recover_session(chat.host, info).outcome)
    else:
        chat.drive(lambda: resume_turn(chat.host, info))


def _exit(_chat: Chat, _: str) -> str:
    return "exit"


_HANDLERS: dict[str, Callable[[Chat, str], Any]] = {
    "/help": _help,
    "/status": _on_session("status"),
    "/cost": _cost,
    "/context": _on_session("context"),
    "/compact": _compact,
    "/plan": _plan,
    "/approve": _approve,
    "/model": _model,
    "/fork": _fork,
    "/rewind": _rewind,
    "/undo": _undo,
    "/stop": _on_session("stop", "--wait", "5"),
    "/resume": _resume,
    "/dismiss": _on_session("dismiss"),
    "/exit": _exit,
}


__all__ = ["COMMANDS", "KEYS", "SlashCompleter", "invoke", "prompt_commands", "run_slash"]
