"""The fact sheet: what a compaction checkpoint must never lose, derived from the log alone."""

from __future__ import annotations

import re
from collections.abc import Iterable

import msgspec

from bubu.events import Error, FunctionCall, FunctionResponse, Record, Text
from bubu.projections.memory import PlanItem, clean_key, is_memory_path, plan_counts, plan_items
from bubu.projections.memory import plan_lines as _plan_lines
from bubu.toolfacts import facts_of

_EXIT = re.compile(r"exit code (-?\d+)")


class Facts(msgspec.Struct, kw_only=True):
    """Goal, requests, files changed, commands run, pending reviews and open errors."""

    goal: str | None = None
    requests: list[str] = msgspec.field(default_factory=list)
    files: dict[str, str] = msgspec.field(default_factory=dict)
    commands: list[tuple[str, str]] = msgspec.field(default_factory=list)
    """The last commands run (the sheet shows 20; `commands_run` counts them all)."""
    commands_run: int = 0
    pending_review: list[str] = msgspec.field(default_factory=list)
    errors: list[str] = msgspec.field(default_factory=list)
    plan: tuple[PlanItem, ...] | None = None
    remembered: list[str] = msgspec.field(default_factory=list)
    _calls: dict[str, FunctionCall] = msgspec.field(default_factory=dict)
    _after: dict[str, tuple[str, str]] = msgspec.field(default_factory=dict)

    def apply(self, r: Record) -> None:
        """Fold one record in."""
        ev, c, a = r.event, r.event.content, r.event.actions
        if isinstance(c, Text) and ev.role == "user" and ev.author != "host":
            if self.goal is None:
                self.goal = c.text
            else:
                self.requests = [*self.requests[-4:], c.text]
        elif isinstance(c, FunctionCall):
            self._calls[c.call_id] = c
        elif isinstance(c, FunctionResponse):
            # A call's first outcome is its outcome: what was called is not kept past it.
            call = self._calls.pop(c.call_id, None)
            if call is None:
                return
            after = self._after.pop(c.call_id, None)
            if after is not None and not c.is_error:
                path, sha = after
                self.files[path] = sha
            if call.name == "update_plan" and not c.is_error:
                items = plan_items(call.arguments.get("items"))
                self.plan = items if isinstance(items, tuple) else self.plan
            if call.name == "remember" and not c.is_error:
                key = clean_key(str(call.arguments.get("key", "")))
                self.remembered = [*(k for k in self.remembered if k != key), key]
            if facts_of(call.name).command is not None:
                m = _EXIT.search(c.result[-400:]) if not c.is_error else None
                status = f"exit {m.group(1)}" if m else ("failed" if c.is_error else "done")
                if c.result.startswith("interrupted"):
                    status = "interrupted"
                self.commands = [
                    *self.commands[-19:],
                    (facts_of(call.name).command_of(call.arguments) or "", status),
                ]
                self.commands_run += 1
            if c.result.startswith("interrupted"):
                self.pending_review.append(
                    (
                        f"{call.name} "
                        f"{call.arguments.get('path') or call.arguments.get('command') or ''}"
                    ).strip()
                )
            elif c.is_error:
                self.errors.append(
                    f"{call.name}: {c.result.splitlines()[0][:200] if c.result else ''}"
                )
                self.errors = self.errors[-5:]
        elif isinstance(c, Error):
            self.errors = [*self.errors, f"{c.error_class}: {c.message[:200]}"][-5:]
        if a is not None and a.tool_dispatch is not None:
            d = a.tool_dispatch
            if d.path and d.after_sha256 and not is_memory_path(d.path):
                self._after[d.call_id] = (d.path, d.after_sha256)

    def render(self) -> str:
        """The fact sheet as text for the model."""
        out = ["## Facts from the log (exact)"]
        out.append(f"Goal: {self.goal or '(none)'}")
        for q in self.requests[-5:]:
            out.append(f"Later request: {q[:2000]}")
        if self.files:
            out.append("Files changed (path, sha-256 now):")
            out += [f"- {p} {sha[:16]}" for p, sha in sorted(self.files.items())]
        if self.commands:
            out.append(f"Commands run ({self.commands_run}, the last 20):")
            out += [f"- {cmd[:200]} → {st}" for cmd, st in self.commands]
        if self.plan:
            out.append(f"Plan ({plan_counts(self.plan)} completed, from update_plan):")
            out += [f"- {line[:300]}" for line in _plan_lines(self.plan)]
        if self.remembered:
            out.append("Notes remembered (recall them): " + ", ".join(self.remembered[-20:]))
        if self.pending_review:
            out.append("Interrupted by a crash, not verified: " + "; ".join(self.pending_review))
        if self.errors:
            out.append("Recent errors: " + " | ".join(self.errors))
        return "\n".join(out)


def facts(records: Iterable[Record]) -> Facts:
    """The fact sheet of the records."""
    f = Facts()
    for r in records:
        f.apply(r)
    return f
