"""What `bubu chat` shows while a turn runs: the model's answer streamed, then rendered as
Markdown (code highlighted) once committed; tool calls as compact cards with a preview of their
result; the status line at the bottom; approvals asked inline (y / n / a = always for a pattern).

It is the terminal view of `bubu run` (`TerminalObserver`: the same console, cards, notice and
turn-end lines, the same status line and the same escaping) with one difference: the text still
streaming is held in the live region above the status line, since once committed it is printed
again as Markdown. The Markdown's source is made `printable` first, so a model cannot drive the
terminal through it either.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import TextIO

from rich.console import Group, RenderableType
from rich.markdown import Markdown

from bubu.cli.render import TerminalObserver, prompt_lines, shown
from bubu.cli.term import printable
from bubu.engine import commandline, runners
from bubu.engine.permissions import Answer, asked_command
from bubu.events import (
    PermissionRequest,
    Record,
    SystemNote,
    Text,
    Thinking,
    TurnEnded,
)
from bubu.log import redact
from bubu.pricing import CostTally
from bubu.projections.processes import ProcessFold, status_line
from bubu.providers.base import Delta

AskLine = Callable[[str], str]
"""Reads one answer from the person (raises EOFError / KeyboardInterrupt as input() does)."""


DESTRUCTIVE = frozenset(
    {
        "rm",
        "rmdir",
        "mv",
        "cp",
        "ln",
        "dd",
        "shred",
        "truncate",
        "chmod",
        "chown",
        "chgrp",
        "kill",
        "pkill",
        "killall",
        "find",
        "sed",
        "tee",
        "git",
        "curl",
        "wget",
        "ssh",
        "scp",
        "rsync",
        "sudo",
        "su",
        "mkfs",
        "mount",
        "umount",
        "docker",
        "pip",
        "npm",
        "systemctl",
        "crontab",
        "install",
    }
)
"""Programs whose arguments decide what they destroy or send: "always" approves only the
exact line for them (``rm -rf build`` must not become ``rm *``)."""


def always_pattern(command: str) -> str:
    """The allow-list pattern that "always" approves for `command`: its program and any
    arguments (``pytest *``) when it is one plain command, else the line itself, exactly.

    The line is judged by the allow-list's own parser: several commands, a redirection, an
    assignment, a word the shell would expand, a program that runs code (a shell, an
    interpreter, a package runner: `runners.RUNNERS`), an option that writes or runs
    (`runners.OPTIONS`) or a program that deletes, moves or sends (`DESTRUCTIVE`) gets the exact
    line: a wildcard must never approve more than the person saw (``python3 a.py`` must not
    become ``python3 *``, which approves ``python3 -c …``)."""
    exact = command.strip(" \t\n")
    line = commandline.parse(command)
    if line.refusal or line.expands or line.writes or len(line.commands) != 1:
        return exact
    c = line.commands[0]
    if c.assigns or c.name is None or not c.argv or "\n" in exact:
        return exact
    program = runners.program(c.name)
    if runners.runner(c.name) or runners.refusal(c.argv) or program in DESTRUCTIVE:
        return exact
    if any(ch in exact for ch in "#\\"):
        return exact  # a comment or an escape: what is shown is not what one word says
    return f"{exact.split(maxsplit=1)[0]} *"


class ChatView(TerminalObserver):
    """`TerminalObserver` for the interactive session: the status line while a turn runs."""

    def __init__(self, out: TextIO | None = None, *, ask_line: AskLine | None = None) -> None:
        super().__init__(out)
        self.status_on = False  # until a turn begins
        self._ask_line = ask_line or input
        self._draft = ""
        self._draft_kind = "text"
        self.always: list[str] = []
        """Patterns the person answered "always" to; the chat adds them to the host's policy."""
        self.on_always: Callable[[str], None] | None = None
        self.objects: Callable[[str], bytes | None] | None = None
        """The store's snapshot objects: the status line then names what the turn changed."""
        self._first_tree: str | None = None
        self.changed: list[str] = []
        """The paths the running turn has changed so far (from its snapshots)."""
        self.processes = ProcessFold()
        """The session's background processes, for the status line."""
        self._procs_of = ""

    # -- the live region --------------------------------------------------------------------------

    def _live_renderable(self) -> RenderableType:
        if not self._draft:
            return self._status_line()
        # What streams, near the prompt; a run that may be the start of a secret waits.
        tail = "\n".join(redact.shown_prefix(self._draft).splitlines()[-12:])
        style = "" if self._draft_kind == "text" else "dim italic"
        return Group(shown((tail, style)), self._status_line())

    def begin(self) -> None:
        """A turn starts: counters from zero, the live region shown (a new one each time: an old
        one would erase what it once held)."""
        self.started = time.monotonic()
        self.steps = self.tokens = 0
        self.cost = CostTally()
        self.activity = None
        self._draft = ""
        self._first_tree, self.changed = None, []
        with self._lock:
            self.status_on = self.console.is_interactive
            self._draw_status()

    def end(self) -> None:
        """The turn is over: what streamed but was never committed (a stopped call) stays on
        screen as plain text; the live region goes."""
        self._cut_draft()
        with self._lock:
            self.status_on = False
            self._hide_status()

    close = end

    def _cut_draft(self) -> None:
        with self._lock:
            draft, self._draft = self._draft, ""
        if draft.strip():
            self.line((draft + " …", "dim"))

    # -- Observer ---------------------------------------------------------------------------------

    def on_delta(self, delta: Delta) -> None:
        """Keep the streamed text for the live region."""
        with self._lock:
            if delta.kind != self._draft_kind and self._draft:
                self._draft += "\n"
            self._draft_kind = delta.kind
            self._draft += delta.text
            if delta.kind == "text" and delta.text:
                self._streamed = True  # a failed attempt's text is then marked discarded
            if time.monotonic() - self._drawn > 0.1:
                self._draw_status()

    def on_records(self, records: Sequence[Record]) -> None:
        """A committed response replaces what streamed: its text rendered as Markdown, its
        thinking dimmed; then the cards and lines of `TerminalObserver`."""
        for r in records:
            c = r.event.content
            self._follow_snapshots(r)
            if r.event.session != self._procs_of:  # another session: its own processes
                self.processes, self._procs_of = ProcessFold(), r.event.session
            self.processes.apply(r)
            if isinstance(c, SystemNote) and isinstance(c.note, TurnEnded):
                self._cut_draft()  # what streamed of a call the end cut off, before the end
            if r.event.role != "model":
                continue
            self._draft = ""
            if isinstance(c, Thinking) and c.text.strip():
                self.line((c.text.strip(), "dim italic"))
            elif isinstance(c, Text) and c.text.strip():
                # No OSC 8 hyperlinks: a link's target is shown, never hidden behind its text.
                md = Markdown(printable(c.text), code_theme="monokai", hyperlinks=False)
                self.print(md)
        super().on_records(records)

    def _follow_snapshots(self, r: Record) -> None:
        """Keep `changed` up to date from the turn's first snapshot to its latest."""
        from bubu.errors import CorruptLog
        from bubu.snapshot import refs, tree

        snap = refs.snapshot_of(r)
        if snap is None or snap.tree is None or self.objects is None:
            return
        if self._first_tree is None:
            self._first_tree = snap.tree
            return
        with contextlib.suppress(CorruptLog):
            self.changed = [c.path for c in tree.changes(self.objects, self._first_tree, snap.tree)]

    def status_text(self) -> str:
        """The status line, and the files the turn has changed so far."""
        text = super().status_text()
        running = status_line(self.processes.procs.values())
        if running:
            text = f"{text} · {printable(running)}"
        if not self.changed:
            return text
        shown = ", ".join(self.changed[:3]) + (
            f" +{len(self.changed) - 3}" if len(self.changed) > 3 else ""
        )
        return f"{text} · changed {printable(shown)}"

    def _shows_committed_text(self) -> bool:
        return False  # printed above as Markdown, whether it streamed or not

    def dismiss_hint(self, session: str) -> str:
        return "/dismiss dismisses it"

    def ask(self, request: PermissionRequest) -> Answer | None:
        """Ask inline: y allows, n denies, a allows and approves the pattern shown from now on
        (commands only, never a protected path); Ctrl-C stops the turn."""
        from bubu.engine.driver import stop_all

        command = asked_command(request)
        pattern = always_pattern(command) if command is not None and not request.protected else None
        with self._lock:
            wanted, self.status_on = self.status_on, False
            self._hide_status()
        try:
            for ln in prompt_lines(request):
                self.line((ln, "yellow" if ln.startswith("!") else ""))
            choices = "y = yes · n = no" + (f" · a = always allow `{pattern}`" if pattern else "")
            self.line((f"  {choices}", "dim"))
            while True:
                try:
                    got = self._ask_line("? allow it [y/n" + ("/a" if pattern else "") + "] ")
                except KeyboardInterrupt:
                    stop_all("stopped")
                    return "deny"
                except EOFError:
                    return "deny"
                word = got.strip().lower()
                if word in ("y", "yes"):
                    return "allow"
                if word in ("", "n", "no"):
                    return "deny"
                if pattern is not None and word in ("a", "always"):
                    self.always.append(pattern)
                    if self.on_always is not None:
                        self.on_always(pattern)
                    self.line((f"  allowed from now on: {pattern}", "dim"))
                    return "allow"
                self.line(("  answer y, n" + (" or a" if pattern else ""), "dim"))
        finally:
            with self._lock:
                self.status_on = wanted
            self._draw_status()


__all__ = ["ChatView", "always_pattern"]
