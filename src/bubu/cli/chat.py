"""`bubu chat` (and plain `bubu` on a terminal): an interactive session in the terminal.

Each message is a turn of one session, run exactly as `bubu run --session S "MESSAGE"` runs it
(the same host, signals, log and recovery), so a chat shows in `bubu sessions` and the web UI and
`bubu run -c` continues it. The prompt keeps a history in `$BUBU_HOME/chat_history`
(`bubu.cli.chathistory`) and takes several lines; slash commands (`bubu.cli.slash`) are thin
calls of the other commands on this session.

Keys: Enter sends; Alt-Enter (Esc then Enter) or a line ending in ``\\`` starts a new
line; Tab completes a slash command (the prompt files' too) or an ``@path`` of the workspace,
whose file is given to the model with the message; Up and Down walk the history. Ctrl-C while
a turn runs stops it (the turn ends `stopped`, as with `bubu run`); at the prompt Ctrl-C clears
the line, and a second one in a row, or Ctrl-D on an empty line, leaves.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bubu.cli import shutdown
from bubu.cli.agentcmds import (
    EXIT,
    default_model,
    latest_here,
    make_host,
    model_options,
    plan_option,
    session_options,
    signals,
)
from bubu.cli.app import Ctx, cli, fail, pass_ctx
from bubu.cli.settling import settle
from bubu.cli.term import one_line
from bubu.engine.session import Host, check_task, new_session, start_turn
from bubu.errors import BubuError
from bubu.log.store import SessionInfo, Store

if TYPE_CHECKING:
    from bubu.cli.prompts import Prepared

PROMPT = "› "


class Chat:
    """One interactive session: its host, its view, the session once the first message made it."""

    def __init__(self, ctx: Ctx, workspace: str, opts: dict[str, Any]) -> None:
        self.ctx = ctx
        self.store: Store = ctx.store
        self.workspace = str(Path(workspace).expanduser().resolve())
        self.opts = opts
        from bubu.cli.chatview import ChatView  # rich: loaded only for a chat

        self.view = ChatView(ask_line=self._ask_line)
        self.view.on_always = self._allow_always
        self.view.objects = self.store.get_object
        self.info: SessionInfo | None = None
        self.host: Host
        self.model: str
        self.interrupts = 0
        """Ctrl-C presses in a row; the second one at the prompt leaves."""
        self._prompt: Any = None

    # -- opening ----------------------------------------------------------------------------------

    def open(self, session_ref: str | None, cont: bool) -> None:
        """Continue `session_ref` (or this workspace's latest with `cont`), else get ready for a
        new session; a bad model spec or session fails here, before anything is written."""
        self.ask_trust()
        if session_ref or cont:
            from bubu.cli.agentcmds import continuing_host

            info = (
                self.store.session(session_ref)
                if session_ref
                else latest_here(self.store, self.workspace)
            )
            self.host, self.info, self.model = continuing_host(
                self.store, info, self.opts, self.view, new_turn=True
            )
            self.host.check_integrity(self.info.id)  # refused before the chat opens
            self.opts = {**self.opts, "model": self.model}
        else:
            self.opts = settle(self.opts, self.workspace)
            self.model = self.opts["model"] or default_model(self.opts["configured_model"])
            self.host = make_host(self.store, self.model, self.opts, self.view)

    def ask_trust(self) -> None:
        """Ask once whether to trust this workspace's config file, when it chooses who acts (a
        model, a server, MCP servers) and has no answer for what it says now; record the answer."""
        from bubu import trust
        from bubu.settings import chooser_files, choosers, root_of, workspace_layer

        ws = workspace_layer(self.workspace)
        keys = choosers(ws) if ws is not None else []
        if ws is None or not keys:
            return
        current = trust.digest(chooser_files(ws))
        prior = trust.answer(root_of(ws))
        if prior is not None and prior.digest == current:
            return  # trusted as it is, or already declined as it is
        changed = " (changed since you trusted it)" if prior is not None and prior.trusted else ""
        self.say(
            f"{ws.path}{changed} sets {', '.join(keys)}: it would choose who acts here. Trust it "
            "only if you wrote it or have read it; a change to it asks again."
        )
        try:
            reply = self._ask_line("Trust this workspace's config? [y/N] ")
        except (EOFError, KeyboardInterrupt):
            reply = ""
        yes = reply.strip().lower() in ("y", "yes")
        trust.record(root_of(ws), current, trusted=yes)
        self.say(
            "trusted (`bubu trust --revoke` undoes it)"
            if yes
            else "not trusted: its model, server, MCP servers and hooks are ignored "
            "(`bubu trust` later)",
            dim=True,
        )

    def header(self) -> None:
        """Which session, model and workspace; what is pending on it; how to get help."""
        where = self.info.workspace if self.info is not None else self.workspace
        sid = self.info.id if self.info is not None else "new session"
        self.say(f"bubu chat · {sid} · {self.model} · {where}", dim=True)
        self.say("/help lists the commands · Ctrl-C stops a turn · Ctrl-D leaves", dim=True)
        from bubu.cli.settling import announce

        announce(self.say)
        if self.info is not None:
            self.pending()
        # As `bubu run` does: sessions whose runner died here are continued, each in a process
        # of its own (before the prompt, so that what it says is not drawn over).
        from bubu.cli.background import continue_crashed

        continue_crashed(self.store, self.ctx.db, skip={self.info.id} if self.info else set())

    def pending(self) -> None:
        """Recap the session continued, and say what it waits for: an unfinished turn, an
        undismissed notice."""
        from bubu.engine.recovery import needs_recovery
        from bubu.projections.status import fold_status

        assert self.info is not None
        records = self.store.read(self.info.id)
        from bubu.cli.chatrecap import recap

        for line in recap(records):
            self.say(line, dim=True)
        st = fold_status(records)
        if st.notice is not None and not st.notice_dismissed:
            self.view.notice(st.notice, self.info.id)
        if needs_recovery(self.store, self.info):
            self.say(
                f"session {self.info.id} has an unfinished turn (its process is gone): "
                "/resume recovers and continues it"
            )
        elif st.state in ("stopped", "suspended"):
            self.say(f"its last turn is {st.state}: /resume continues it")

    # -- the loop ---------------------------------------------------------------------------------

    def loop(self) -> None:
        """Read messages until /exit, Ctrl-D or two Ctrl-C in a row."""
        from bubu.cli.slash import run_slash

        while not shutdown.requested():
            try:
                text = self.read()
            except KeyboardInterrupt:
                if self.interrupts:
                    break
                self.interrupts += 1
                self.say("(Ctrl-C again or Ctrl-D to leave)", dim=True)
                continue
            except EOFError:
                break
            self.interrupts = 0
            if not text.strip():
                continue
            if text.lstrip().startswith("/"):
                if run_slash(self, text.strip()) == "exit":
                    break
                continue
            self.turn(text)
        if self.info is not None:  # the processes kept for the session end with it
            from bubu.engine.processes import end_session

            end_session(self.info.id, self.store, self.host.owner)
        self.leave()

    def read(self) -> str:
        """One message from the prompt (history, several lines, slash-command completion)."""
        if self._prompt is None:
            self._prompt = _prompt_session(self.workspace)
        return str(self._prompt.prompt(PROMPT))

    def turn(self, task: str) -> None:
        """Run `task` as the next turn of the session (made by the first message)."""
        try:
            check_task(task)
            if self.info is None:
                self.info = new_session(
                    self.store, task=task, workspace=self.workspace, model=self.model
                )
            from bubu.cli.mentions import mentioned

            reads = mentioned(task, self.workspace)
            if reads:
                self.say(f"attaching {', '.join(reads)} (read_file)", dim=True)
            self.drive(lambda: start_turn(self.host, self._info(), task, reads=reads))
        except BubuError as e:
            self.error(str(e))

    def prompt_turn(self, prepared: Prepared) -> None:
        """Send a prompt file's prompt as the next turn, under the model and command patterns
        its front matter chose (for this turn only)."""
        if prepared.ignored:
            self.say(prepared.ignored, dim=True)
        saved = (self.host, self.model)
        if prepared.model or prepared.allow:
            opts = {**self.opts, "allow": (*(self.opts.get("allow") or ()), *prepared.allow)}
            model = prepared.model or self.model
            self.host = make_host(self.store, model, opts, self.view)  # a bad model fails here
            self.model = model
            said = [f"model {model}"] if prepared.model else []
            said += [f"allowing {', '.join(prepared.allow)}"] if prepared.allow else []
            self.say(f"/{prepared.name}: {' · '.join(said)} for this message", dim=True)
        try:
            self.turn(prepared.prompt)
        finally:
            self.host, self.model = saved

    def drive(self, run: Any) -> Any:
        """Run one turn (start, resume or recover) with the live view and Ctrl-C stopping it."""
        self.view.begin()
        reason: Any = None
        try:
            with signals(self.host), _quiet_keys():
                reason = run()
        except KeyboardInterrupt:  # before the turn's runner existed: nothing is running
            self.say("interrupted")
        finally:
            self.view.end()
        if reason == "stopped":
            self.interrupts = 1
            self.say("stopped: /resume continues it · Ctrl-C again or Ctrl-D leaves", dim=True)
        return reason

    def leave(self) -> None:
        """Say where the session is and how to go on with it; after SIGTERM or SIGHUP (the
        terminal went away) the turn is suspended and committed: exit at once, in silence."""
        shutdown.leave(EXIT["suspended"])
        if self.info is not None:
            self.say(
                f"session {self.info.id} · `bubu chat -c` (or `bubu run -c`) here continues it"
            )

    # -- helpers ----------------------------------------------------------------------------------

    def _info(self) -> SessionInfo:
        assert self.info is not None
        return self.info

    def _ask_line(self, question: str) -> str:
        from prompt_toolkit import PromptSession

        return str(PromptSession[str]().prompt(question))

    def _allow_always(self, pattern: str) -> None:
        """An "always" answer: the pattern joins the host's allow-list (and the running turn's);
        the next turn records it, as `--allow PATTERN` would. `PROGRAM *` also brings
        `PROGRAM` alone (the wildcard wants at least one argument)."""
        from dataclasses import replace

        added = (pattern.removesuffix(" *"), pattern) if pattern.endswith(" *") else (pattern,)

        def widen(allowed: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(dict.fromkeys([*allowed, *added]))

        self.host.policy = replace(
            self.host.policy, allow_commands=widen(self.host.policy.allow_commands)
        )
        runner = self.host.runner
        if runner is not None:
            runner.policy = replace(
                runner.policy, allow_commands=widen(runner.policy.allow_commands)
            )
        self.opts = {**self.opts, "allow": widen(tuple(self.opts.get("allow") or ()))}

    def say(self, text: str, *, dim: bool = False) -> None:
        """A line of the chat's own, printed by the view (made printable there)."""
        self.view.line((text, "dim" if dim else ""))

    def error(self, message: str) -> None:
        """A one-line error; the chat goes on."""
        with contextlib.suppress(OSError):
            click.echo(f"bubu: error: {one_line(message)}", err=True)


@contextlib.contextmanager
def _quiet_keys() -> Iterator[None]:
    """While a turn runs, what is typed is not echoed over the live view; it waits, typed
    ahead, for the next prompt (Ctrl-C still stops the turn)."""
    import termios

    fd = sys.stdin.fileno() if sys.stdin.isatty() else None
    saved = termios.tcgetattr(fd) if fd is not None else None
    if fd is not None and saved is not None:
        quiet = list(saved)
        quiet[3] &= ~termios.ECHO
        termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        if fd is not None and saved is not None:
            with contextlib.suppress(termios.error, OSError):
                termios.tcsetattr(fd, termios.TCSANOW, saved)


def _prompt_session(workspace: str) -> Any:
    """The prompt: Enter sends, Alt-Enter or a trailing backslash starts a new line."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.completion import merge_completers
    from prompt_toolkit.key_binding import KeyBindings

    from bubu.cli.chathistory import ChatHistory
    from bubu.cli.mentions import MentionCompleter
    from bubu.cli.slash import SlashCompleter

    keys = KeyBindings()

    @keys.add("enter")
    @keys.add("c-j")  # a typed-ahead Enter arrives as one (the terminal was not raw yet)
    def _send(event: Any) -> None:
        buf = event.current_buffer
        if buf.complete_state is not None and buf.complete_state.current_completion is not None:
            buf.apply_completion(buf.complete_state.current_completion)
            return
        if buf.document.text_before_cursor.endswith("\\"):
            buf.delete_before_cursor(1)
            buf.insert_text("\n")
            return
        buf.validate_and_handle()

    @keys.add("escape", "enter")
    def _newline(event: Any) -> None:
        event.current_buffer.insert_text("\n")

    @keys.add("c-c")
    def _interrupt(event: Any) -> None:
        buf = event.current_buffer
        if buf.text:  # a line being typed is cleared; Ctrl-C on an empty one counts
            buf.reset()
            return
        event.app.exit(exception=KeyboardInterrupt())

    return PromptSession(
        history=ChatHistory(),
        multiline=True,
        key_bindings=keys,
        completer=merge_completers([SlashCompleter(workspace), MentionCompleter(workspace)]),
        complete_while_typing=False,
        prompt_continuation=lambda width, *_: "·".rjust(width - 1) + " ",
    )


@cli.command("chat")
@session_options
@plan_option
@model_options
@pass_ctx
def chat_cmd(ctx: Ctx, /, workspace: str, session_ref: str | None, cont: bool, **opts: Any) -> None:
    """Talk to Bubu in this terminal: each message is a turn of one session (/help inside)."""
    if opts.get("jsonl"):
        fail('--jsonl is for scripts: use `bubu run --jsonl "TASK"`; bubu chat is interactive')
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        fail('bubu chat needs a terminal; in a script use `bubu run "TASK"`')
    chat = Chat(ctx, workspace, opts)
    chat.open(session_ref, cont)
    chat.header()
    chat.loop()


__all__ = ["Chat", "chat_cmd"]
