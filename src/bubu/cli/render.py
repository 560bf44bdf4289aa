"""What a running turn looks like in a terminal: streamed text, tool cards, results, notices and
a live status line, drawn through rich for `bubu run`, `resume`, `recover` and (`ChatView`) the
chat.

One escaping path: every string that reaches the screen is made `printable` (`bubu.cli.term`:
controls, escapes and bidi characters shown as visible escapes, secrets redacted) and put in a
rich `Text` as plain characters (`shown`), never parsed as rich markup or ANSI, so `[bold red]`
or an escape sequence in a model's text prints as it is written. Colours and weights are rich
styles on those texts: on a terminal rich writes them (NO_COLOR drops the colours, keeps the
weights) and keeps the status line in a live region at the bottom; in a pipe, or with
`color=False`, the very same lines are written as plain characters, with no status line and no
escape at all, so a script's output is stable.

Only the commands that run a turn import this module (and rich with it): reading a session does not.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, TextIO, cast

import click
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.live import Live
from rich.text import Text as RichText

from bubu import pricing
from bubu.cli import shutdown
from bubu.cli.app import emit_jsonl
from bubu.cli.term import one_line, printable
from bubu.engine.permissions import Answer, asked_command, show_command, visible_line
from bubu.events import (
    ChildFinished,
    ChildStarted,
    Error,
    FunctionCall,
    FunctionResponse,
    ModelSwitch,
    PermissionRequest,
    Record,
    RecoveryNotice,
    ServerNote,
    SystemNote,
    Text,
    TurnEnded,
    TurnStarted,
    WindowLearned,
)
from bubu.log import redact
from bubu.pricing import CostTally
from bubu.projections.longrun import LongRunFold
from bubu.projections.memory import plan_counts, plan_items
from bubu.projections.recovery import one_line_marked
from bubu.projections.transcript import (
    child_text,
    notice_text,
    server_text,
    switch_text,
    unknown_usage,
)
from bubu.providers.base import Delta
from bubu.toolfacts import facts_of


def _short(value: object, width: int = 70) -> str:
    return one_line(str(value), width)


def call_label(c: FunctionCall) -> str:
    """A one-line label for a tool call."""
    a = c.arguments
    main = facts_of(c.name).headline_of(a) or ""
    # A newline stays visible (⏎): `echo ok` and `rm -rf x` on two lines are two commands.
    return f"{_short(c.name, 40)} {_short(one_line_marked(str(main)))}".rstrip()


def result_label(c: FunctionResponse) -> str:
    """A one-line summary of a tool result; a failed one also shows its last line, where a
    command's reason is (`timed out after 1s; …killed`)."""
    declared = facts_of(c.name).result
    if declared is not None:
        return _short(declared(c.result, c.is_error), 160)
    lines = c.result.splitlines() or [""]
    first = next((n for n, x in enumerate(lines) if x.strip()), 0)
    head = _short(lines[first], 60)
    last = next((n for n in range(len(lines) - 1, first, -1) if lines[n].strip()), None)
    if c.is_error and last is not None:
        hidden = len(lines) - 2
        more = f" (+{hidden} lines)" if hidden > 0 else ""
        return f"{head} — {_short(lines[last], 90)}{more}"
    more = f" (+{len(lines) - 1} lines)" if len(lines) > 1 else ""
    return f"{head}{more}"


Part = str | tuple[str, str]
"""A piece of a line: text, or (text, rich style)."""


def shown(*parts: Part) -> RichText:
    """A line of the view made of `parts`, each made `printable` (the one escaping path) and
    kept as plain characters, a `(text, style)` part styled: nothing in it is read as markup."""
    line = RichText()
    for part in parts:
        text, style = (part, "") if isinstance(part, str) else part
        line.append(printable(text), style=style or None)
    return line


class _Verbatim:
    """A `shown` text written exactly: not wrapped, cropped, padded or tab-expanded by rich (a
    pipe gets the characters as they are; a terminal wraps a long line itself)."""

    def __init__(self, text: RichText, end: str = "\n") -> None:
        self.text = text
        self.end = end

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from self.text.render(console, end=self.end)


class _Stdout:
    """`sys.stdout` as it is at each write, as `click.echo` finds it (not as it was when the
    view was made: a test, or a command, may have replaced it since)."""

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()

    def isatty(self) -> bool:
        return sys.stdout.isatty()

    def __getattr__(self, name: str) -> Any:
        return getattr(sys.stdout, name)


def console_for(out: TextIO, *, tty: bool, color: bool) -> Console:
    """The rich console a view draws through: styles only with `color` (rich reads NO_COLOR and
    the terminal's colours), cursor moves (the live status line) only on a terminal."""
    return Console(
        file=out,
        force_terminal=tty,
        color_system=("auto" if tty else "standard") if color else None,
        highlight=False,
        markup=False,
        emoji=False,
    )


class TerminalObserver:
    """Streams a turn to a terminal; on a TTY keeps a status line at the bottom."""

    def __init__(
        self, out: TextIO | None = None, *, color: bool | None = None, quiet: bool = False
    ) -> None:
        # A closed terminal must not crash a turn.
        self.out = shutdown.tolerant(out or cast(TextIO, _Stdout()))
        self.tty = self.out.isatty()
        self.color = self.tty if color is None else color
        self.console = console_for(self.out, tty=self.tty, color=self.color)
        self.quiet = quiet
        self.started = time.monotonic()
        self.activity: str | None = None
        self.steps = 0
        self.tokens = 0
        self.unknown_usage = 0  # calls whose server reported no usage
        self.cost = CostTally()
        self.plan: str | None = None  # "2/5" once the model keeps a plan (update_plan)
        self.children: list[str] = []
        """The sub-agents running now (`delegate`)."""
        self._plan_calls: dict[str, FunctionCall] = {}
        self._waiting: dict[str, str] = {}
        """Calls shown whose result has not come yet: call id -> name."""
        self._parallel: set[str] = set()
        """Of those, the ones that were awaited together with another."""
        self._streamed = False
        """Whether model text was streamed since the last committed answer or failed attempt."""
        self._in_text = False
        self._cr = False
        self._stream = redact.Stream()
        self._last_kind = "text"
        self.status_on = self.console.is_interactive
        """Whether the status line is wanted now (a terminal that can redraw a line)."""
        self._live: Live | None = None
        """The live region at the bottom that holds the status line, while it is shown."""
        self._drawn = 0.0
        self.longrun = LongRunFold()
        """The records seen so far, folded: a wait for the provider is shown from the log."""
        self._lock = threading.RLock()
        self._ticker: threading.Thread | None = None
        self._done = threading.Event()
        if self.tty:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()

    # -- output helpers ---------------------------------------------------------------------------

    def print(self, renderable: RenderableType) -> None:
        """Print a renderable of rich's own (the chat's Markdown of printable text) above the
        status line; a closed terminal is not the turn's problem."""
        with self._lock, contextlib.suppress(OSError, ValueError):
            self.console.print(renderable)

    def _write(self, text: RichText, end: str = "\n") -> None:
        """Write a `shown` text where the cursor is, exactly."""
        with self._lock, contextlib.suppress(OSError, ValueError):
            self.console.print(_Verbatim(text, end), soft_wrap=True)

    def _hide_status(self) -> None:
        """Take the status line away (text streams where it stood; a question is asked)."""
        with self._lock:
            live, self._live = self._live, None
            if live is not None:
                with contextlib.suppress(OSError, ValueError):
                    live.stop()

    def _draw_status(self) -> None:
        """Draw (or redraw) the live region, unless text is streaming at the cursor."""
        with self._lock:
            if not self.status_on or self._in_text or self._done.is_set():
                return
            with contextlib.suppress(OSError, ValueError):
                if self._live is None:
                    self._live = Live(
                        get_renderable=self._live_renderable,
                        console=self.console,
                        auto_refresh=False,  # the ticker redraws it, under the lock
                        transient=True,
                        redirect_stdout=False,
                        redirect_stderr=False,
                    )
                    self._live.start()
                    # The cursor stays visible, at the status line's end: a run killed while
                    # the line is shown must not leave the terminal without one.
                    self.console.show_cursor(True)
                self._live.refresh()
                self._drawn = time.monotonic()

    def _live_renderable(self) -> RenderableType:
        return self._status_line()

    def _status_line(self) -> RichText:
        line = shown((self.status_text(), "dim"))
        line.no_wrap, line.overflow = True, "ellipsis"  # one line, whatever the width
        return line

    def status_text(self) -> str:
        """The status line: step, what runs now (or the wait for the provider), tokens, time."""
        from bubu import clock
        from bubu.cli.longrun import waiting_line

        elapsed = int(time.monotonic() - self.started)
        waiting = self.longrun.waiting()
        what = (
            waiting_line(waiting, clock.now_ms())
            if waiting
            else one_line(self.activity or "working", 60)
        )
        plan = f" · plan {self.plan}" if self.plan else ""
        if self.children:
            names = ", ".join(self.children[:2]) + (
                f" +{len(self.children) - 2}" if len(self.children) > 2 else ""
            )
            plan += (
                f" · {len(self.children)} sub-agent{'s' if len(self.children) != 1 else ''}"
                f" running ({names})"
            )
        return (
            f"  ◦ step {self.steps} · {what}{plan} · {self.tokens:,} tokens"
            f"{unknown_usage(self.unknown_usage)} · {self.cost.text()}"
            f" · {elapsed // 60}:{elapsed % 60:02d}"
        )

    def _child(self, n: ChildStarted | ChildFinished) -> None:
        """Keep the list of running sub-agents (their session ids, with the agent's name)."""
        label = n.child + (f" {n.agent}" if isinstance(n, ChildStarted) and n.agent else "")
        self.children = [c for c in self.children if not c.startswith(n.child)]
        if isinstance(n, ChildStarted):
            self.children.append(label)
            self.line(("  ↳ ", "cyan"), child_text(n))
        else:
            self.line(("  ↲ ", "cyan"), child_text(n))

    def _tick(self) -> None:
        while not self._done.wait(0.5):
            self._draw_status()

    def line(self, *parts: Part) -> None:
        """Print a full line above the status line, made of `parts` (see `shown`)."""
        with self._lock:
            self._end_text()
            self._write(shown(*parts))
            self._draw_status()

    def close(self) -> None:
        """Stop the status line."""
        self._done.set()
        with self._lock:
            self.status_on = False
            self._hide_status()
            self._end_text()

    def _end_text(self) -> None:
        self._flush_stream()
        if self._in_text:
            self._write(RichText())
            self._in_text = False
        self._cr = False

    def _flush_stream(self) -> None:
        """Show what the stream held back (a text that ended inside a run of characters)."""
        rest = self._stream.flush()
        if rest:
            self._write(shown((rest, _delta_style(self._last_kind))), end="")

    # -- Observer ---------------------------------------------------------------------------------

    def on_delta(self, delta: Delta) -> None:
        """Stream model text as it arrives (thinking is shown dimmed)."""
        if self.quiet:
            return
        with self._lock:
            self._hide_status()
            if self._in_text and delta.kind != self._last_kind:
                self._flush_stream()
                self._write(RichText())
                self._cr = False
            # A CR-LF may be split across two deltas: hold a trailing CR until the next one.
            raw = ("\r" if self._cr else "") + delta.text
            self._cr = raw.endswith("\r")
            # A secret may arrive in several deltas: the stream holds a run until it is whole,
            # then shows it redacted, as the log will hold it.
            held = self._stream.feed(raw[:-1] if self._cr else raw)
            self._last_kind = delta.kind
            if delta.kind == "text" and delta.text:
                self._streamed = True
            self._in_text = True
            self._write(shown((held, _delta_style(delta.kind))), end="")

    def on_activity(self, text: str | None) -> None:
        """Update the status line."""
        with self._lock:
            self.activity = text
            self._draw_status()

    def on_records(self, records: Sequence[Record]) -> None:
        """Print committed tool calls, results, errors and the turn's end."""
        for r in records:
            ev, c, a = r.event, r.event.content, r.event.actions
            self.longrun.apply(r)
            if isinstance(c, SystemNote) and isinstance(c.note, ChildStarted | ChildFinished):
                self._child(c.note)
            if isinstance(c, SystemNote) and isinstance(c.note, TurnStarted):
                # Before its first call, a turn's cost is $0 only for a model with a price.
                self.cost.priced = pricing.known(c.note.model)
            if a is not None and a.token_usage is not None:
                self.steps += 1
                self.tokens += a.token_usage.input_tokens + a.token_usage.output_tokens
                self.unknown_usage += a.token_usage.usage_unknown
                u = a.token_usage
                self.cost.add(u.model, u.cost_usd, u.input_tokens, u.output_tokens)
                if self._in_text:
                    with self._lock:
                        self._end_text()
            if isinstance(c, Text) and ev.role == "model":
                # A provider that does not stream sends the answer only as the committed text.
                if c.text and self._shows_committed_text():
                    self.line(c.text)
                self._streamed = False
            elif isinstance(c, FunctionCall):
                if c.name == "update_plan":
                    self._plan_calls[c.call_id] = c
                self._waiting[c.call_id] = c.name
                if len(self._waiting) > 1:
                    self._parallel.update(self._waiting)
                self.line(("⏺ ", "cyan"), call_label(c))
            elif isinstance(c, FunctionResponse):
                self._note_plan(c)
                mark = ("  ✗ ", "red") if c.is_error else ("  ⎿ ", "dim")
                self.line(mark, *self._whose(c), result_label(c))
            elif isinstance(c, Error):
                if self._streamed and not self.quiet:
                    self.line(("  ↺ the text above was discarded: that attempt failed", "dim"))
                self._streamed = False
                self.line((f"  ! {_short(c.error_class, 40)}: {_short(c.message, 100)}", "yellow"))
            elif isinstance(c, SystemNote) and isinstance(c.note, ServerNote | WindowLearned):
                self.line((f"  ! {server_text(c.note)}", "yellow"))
            elif isinstance(c, SystemNote) and isinstance(c.note, ModelSwitch):
                self.line((f"  ⇄ {switch_text(c.note)}", "yellow"))
            elif isinstance(c, SystemNote) and isinstance(c.note, RecoveryNotice):
                self.notice(c.note, ev.session)
            elif isinstance(c, SystemNote) and isinstance(c.note, TurnEnded):
                n = c.note
                colour = {"completed": "green", "failed": "red"}.get(n.reason, "yellow")
                said = f": {n.message}" if n.message else ""
                self.line((f"● turn {n.reason}", f"bold {colour}"), said)

    def _note_plan(self, c: FunctionResponse) -> None:
        """Keep the status line's "plan done/all" in step with successful update_plan calls."""
        call = self._plan_calls.pop(c.call_id, None)
        if call is None or c.is_error:
            return
        items = plan_items(call.arguments.get("items"))
        if isinstance(items, tuple):
            self.plan = plan_counts(items) if items else None

    def _shows_committed_text(self) -> bool:
        """Whether a committed answer is printed: when nothing of it was streamed here."""
        return self.quiet or not self._streamed

    def _whose(self, c: FunctionResponse) -> tuple[Part, ...]:
        """`name: ` before a result whose call is not the only one awaited (parallel calls finish
        in any order) or was not shown here (a recovery's results for a crashed run's calls)."""
        alone = c.call_id in self._waiting and c.call_id not in self._parallel
        self._waiting.pop(c.call_id, None)
        self._parallel.discard(c.call_id)
        return () if alone else ((f"{_short(c.name, 40)}: ", "bold"),)

    def notice(self, n: RecoveryNotice, session: str) -> None:
        """Print the recovery notice as a framed block."""
        colour = "red" if n.status == "blocked" else "yellow"
        lines = printable(notice_text(n, session)).splitlines()
        self.line(("┌ " + lines[0], f"bold {colour}"))
        for ln in lines[1:]:
            self.line(("│ ", colour), ln)
        self.line((f"└ {self.dismiss_hint(session)}", f"dim {colour}"))

    def dismiss_hint(self, session: str) -> str:
        """How the notice's reader dismisses it, under the framed block."""
        return f"dismiss with `bubu dismiss {session}`"

    def ask(self, request: PermissionRequest) -> Answer | None:
        """Ask on the terminal; None when there is no terminal to ask on."""
        if not (sys.stdin.isatty() and self.tty):
            return None
        with self._lock:
            wanted, self.status_on = self.status_on, False
            self._hide_status()
            self._end_text()
            try:
                for line in prompt_lines(request):
                    self._write(shown((line, "yellow" if line.startswith("!") else "")))
                ok = self._confirm("? allow it")
            finally:
                self.status_on = wanted
        self._draw_status()
        return "allow" if ok else "deny"

    def _confirm(self, question: str) -> bool:
        """Yes or no from the terminal (Enter: no), as `click.confirm` asks it."""
        while True:
            self._write(shown((question, "bold"), " [y/N]: "), end="")
            try:
                word = input().strip().lower()
            except (EOFError, KeyboardInterrupt):
                self._write(RichText())
                raise click.Abort from None
            if word in ("y", "yes"):
                return True
            if word in ("", "n", "no"):
                return False
            self._write(shown("Error: invalid input"))


def _delta_style(kind: str) -> str:
    """How streamed text is shown: the answer plain, thinking dimmed."""
    return "" if kind == "text" else "dim italic"


def prompt_lines(request: PermissionRequest) -> list[str]:
    """What a person reads before answering a request: a command exactly, line by line (each
    newline marked ⏎, invisible characters shown), why it asks, and for a protected path that
    nothing but this answer approves it."""
    command = asked_command(request)
    if command is None:
        head = [f"? {visible_line(request.summary)}"]
    else:
        lines = show_command(command)
        count = f" ({len(lines)} lines)" if len(lines) > 1 else ""
        head = [f"? run this command{count}:", *(f"  │ {ln}" for ln in lines)]
    reason = request.reason.strip()
    if reason and reason != (command or "").strip():
        shown = visible_line(reason)
        head.append(f"! {shown}" if request.protected else f"  {shown}")
    return head


class JsonlObserver:
    """One JSON line per committed event, for scripts."""

    _gone = False
    """Set once stdout failed (its reader or terminal went away); nothing more is printed."""

    def on_delta(self, delta: Delta) -> None:
        """Deltas are not events; skip them."""

    def on_activity(self, text: str | None) -> None:
        """Not an event; skip."""

    def on_records(self, records: Sequence[Record]) -> None:
        """Print each record as {seq, hash, event}."""
        for r in records:
            if self._gone:
                return
            try:
                emit_jsonl({"seq": r.seq, "hash": r.hash, "event": r.event})
            except OSError:  # the reader or the terminal went away: the turn goes on in the log
                self._gone = True

    def ask(self, request: PermissionRequest) -> Answer | None:
        """Nobody answers in JSONL mode."""
        return None


__all__ = [
    "JsonlObserver",
    "Part",
    "TerminalObserver",
    "call_label",
    "console_for",
    "printable",  # re-exported: it lives in bubu.cli.term, commands import it from here too
    "result_label",
    "shown",
]
