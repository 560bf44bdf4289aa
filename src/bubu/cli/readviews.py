"""The bodies of `bubu show` and `bubu status`, and what they print, free of click: the click
commands (`bubu.cli.agentcmds`) and the fast path (`bubu.cli.fast`) both run them, so both print
the same."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from bubu.cli.core import Ctx, echo, emit_json
from bubu.cli.longrun import budget_json, waiting_json, waiting_line
from bubu.cli.prices import load_prices
from bubu.cli.term import printable
from bubu.events import Record
from bubu.log.store import SessionInfo, Store
from bubu.projections.memory import plan_counts, plan_items, plan_lines
from bubu.projections.transcript import (
    FORCE_HINT,
    Message,
    ToolCard,
    notice_text,
    transcript,
    unknown_usage,
)


def show(ctx: Ctx, session: str, as_json: bool, thinking: bool, tail: int | None) -> None:
    """Print a session's transcript."""
    info = ctx.store.session(session)
    if tail is None:
        t = transcript(ctx.store.read(info.id))
    else:
        t = tail_transcript(ctx.store, info, tail)
    if as_json:
        from bubu.engine.childtree import children_json

        emit_json(
            {
                "session": _session_json(info),
                "children": children_json(ctx.store, ctx.store.read(info.id, kinds=CHILD_KINDS)),
                "items": t.items,
                "usage": _usage_json(t),
            }
        )
        return
    echo(f"{info.id}  {printable(info.title)}\n  workspace {printable(info.workspace)}\n")
    for item in t.items:
        if isinstance(item, ToolCard):
            echo(f"  ⏺ {printable(item.name)} {_args(item.name, item.arguments)}  [{item.status}]")
            if item.result is not None:
                first = (item.result.strip().splitlines() or [""])[0]
                echo(f"    ⎿ {printable(first[:100])}")
        elif isinstance(item, Message):
            if item.kind == "thinking" and not thinking:
                continue
            prefix = {
                "user": "› ",
                "assistant": "",
                "thinking": "  ∴ ",
                "error": "  ! ",
                "note": "  · ",
                "notice": "  ┃ ",
            }[item.kind]
            for ln in item.text.splitlines() or [""]:
                echo(prefix + printable(ln))
    echo(
        f"\n  {t.model_calls} model calls · {t.input_tokens:,} in / {t.output_tokens:,} out tokens"
        f"{unknown_usage(t.usage_unknown_calls)} · {t.cost.text()}"
    )
    _children_text(status_dict(ctx.store, info))


def _children_text(d: dict[str, object]) -> None:
    """A sub-agent's parent, and the tree of a session's sub-agents with what they spent."""
    from bubu.engine.childtree import running_count, tree_lines

    if d.get("parent"):
        echo(f"  sub-agent of {d['parent']}")
    kids: Any = d.get("children") or []
    if not kids:
        return
    usage: Any = d["children_usage"]
    echo(
        f"  sub-agents: {len(kids)} ({running_count(kids)} running) · "
        f"{usage['tokens']:,} tokens spent by them"
    )
    for ln in tree_lines(kids, "    "):
        echo(printable(ln))


def tail_transcript(store: Store, info: SessionInfo, n: int) -> Any:
    """The last `n` items of the transcript, with the whole session's totals, from the session
    view's snapshot and the records after the first of those items."""
    from bubu.log import readview
    from bubu.projections.views import tail_start

    view = readview.load(store, info.id)
    t = transcript(store.read(info.id, after=tail_start(view, n), upto=view.high_water))
    t.items = t.items[-n:]
    u = view.usage
    t.model_calls, t.usage_unknown_calls, t.cost = u.model_calls, u.usage_unknown_calls, u.cost
    t.input_tokens, t.output_tokens = u.input_tokens, u.output_tokens
    t.cache_read_tokens, t.cache_write_tokens = u.cache_read_tokens, u.cache_write_tokens
    t.reasoning_tokens = u.reasoning_tokens
    return t


def _args(name: str, args: dict[str, object]) -> str:
    from bubu.toolfacts import facts_of

    main = facts_of(name).headline_of(args) or ""
    text = " ".join(printable(str(main)).split())
    return text[:80]


def _usage_json(t: Any) -> dict[str, object]:
    """A transcript's or a view's usage and cost totals, as `show --json` and `status --json`
    give them."""
    return {
        "model_calls": t.model_calls,
        "input_tokens": t.input_tokens,
        "output_tokens": t.output_tokens,
        "cache_read_tokens": t.cache_read_tokens,
        "cache_write_tokens": t.cache_write_tokens,
        "usage_unknown_calls": t.usage_unknown_calls,
        "reasoning_tokens": t.reasoning_tokens,
        **t.cost.json(),
    }


def _session_json(info: SessionInfo) -> dict[str, object]:
    return {
        "id": info.id,
        "title": info.title,
        "workspace": info.workspace,
        "model": info.model,
        "created_ms": info.created_ms,
        "events": info.high_water,
    }


CHILD_KINDS = ("child_started", "child_finished")
"""The kinds a session's sub-agents are folded from."""
STATUS_NOTE_KINDS = (
    "turn_started",
    "plan_approved",
    "child_started",
    "child_finished",
    "process_started",
    "process_output",
    "process_ended",
)


def status_dict(store: Store, info: SessionInfo) -> dict[str, object]:
    """The status of a session as `bubu status --json` prints it."""
    from bubu import clock
    from bubu.engine.scope import lease_is_stale
    from bubu.log import readview
    from bubu.projections.memory import plan_json

    # The last valid snapshot of the session view and the records after it, not the whole log.
    view = readview.load(store, info.id)
    st, t = view.status, view.usage
    # The few kinds the plan mode, the background processes and the sub-agents are folded from.
    noted = store.read(info.id, kinds=STATUS_NOTE_KINDS)
    lease = store.current_lease(info.id)
    now = getattr(store, "now_ms", clock.now_ms)()  # a fleet's leases run on the database clock
    live = not lease_is_stale(lease, now)
    state = (
        "running"
        if st.state == "open" and live
        else ("open turn" if st.state == "open" else st.state)
    )
    out: dict[str, object] = {
        "session": info.id,
        "status": state,
        "turns": st.turns,
        "events": info.high_water,
        "reason": st.reason,
        "pending_permissions": list(st.pending_permissions),
        "usage": _usage_json(t),
        "recovery": None,
        "plan": plan_json(view.plan),
        "plan_mode": plan_mode(noted),
        "processes": running_processes(noted),
    }
    lr = view.longrun
    waiting = lr.waiting() if state == "running" else None
    out["cause"] = lr.end_cause if not lr.open else None
    out["waiting"] = waiting_json(waiting, clock.now_ms()) if waiting is not None else None
    out["turn"] = budget_json(lr, clock.now_ms()) if lr.turn is not None else None
    if state in ("running", "open turn"):
        from bubu.cli.workspacecmds import changed_by_turn

        out["changed"] = [c.line() for c in changed_by_turn(store, store.read(info.id))]
    else:
        out["changed"] = []
    from bubu.engine.childtree import children_json, spent
    from bubu.engine.scope import session_facts

    out["parent"] = session_facts(store, info).parent
    out["children"] = kids = children_json(store, noted)
    tokens, cost = spent(kids)
    out["children_usage"] = {"tokens": tokens, "cost_usd": cost}
    if st.notice is not None:
        n = st.notice
        out["recovery"] = {
            "status": n.status,
            "silent_retries": n.silent_retries,
            "verified_applied": n.verified_applied,
            "pending_review": n.pending_review,
            "leftovers": n.leftovers,
            "workspace_changes": n.workspace_changes,
            "reason": n.reason,
            "forced": n.forced,
            "dismissed": st.notice_dismissed,
            "seq": st.notice_seq,
        }
    return out


def plan_mode(records: Any) -> bool:
    """Whether the session plans: its last turn was a planning one, not approved since."""
    from bubu.events import PlanApproved, SystemNote, TurnStarted

    planning = False
    for r in records:
        c = r.event.content
        if isinstance(c, SystemNote) and isinstance(c.note, TurnStarted):
            planning = c.note.plan
        elif isinstance(c, SystemNote) and isinstance(c.note, PlanApproved):
            planning = False
    return planning


def running_processes(records: Sequence[Record]) -> list[dict[str, object]]:
    """The background processes the log says are running, as `bubu status --json` shows them."""
    from bubu.projections.processes import fold_processes

    return [p.json() for p in fold_processes(records).running()]


def usage_line(usage: Any) -> str:
    """The token part of `bubu status`: calls, input and output, and the cache and reasoning
    shares where there are any (cache reads are billed far below input, writes above it)."""
    line = (
        f"{usage['model_calls']} model calls · {usage['input_tokens']:,} in / "
        f"{usage['output_tokens']:,} out tokens"
    )
    extra = [
        f"{usage[key]:,} {label}"
        for key, label in (
            ("cache_read_tokens", "cache read"),
            ("cache_write_tokens", "cache write"),
            ("reasoning_tokens", "reasoning"),
        )
        if usage.get(key)
    ]
    line += f" ({' · '.join(extra)})" if extra else ""
    return line + unknown_usage(int(usage.get("usage_unknown_calls") or 0))


def cost_lines(usage: Any, *, priced: bool = False) -> str:
    """The cost part of `bubu status`: the total, then one line per model (`priced`: the
    session's model has a price, so no call yet is $0 rather than unknown)."""
    from bubu.pricing import format_usd

    models: dict[str, Any] = usage["by_model"]
    total = format_usd(usage["cost_usd"])
    if usage["cost_usd"] is None and not models and priced:
        total = "$0"  # no call yet, of a model with a price
    if usage["unpriced_calls"] and usage["cost_usd"] is not None:
        total += f" (+{usage['unpriced_calls']} calls of unknown price)"
    lines = [f"  cost: {total}"]
    for name, m in models.items():
        lines.append(
            f"    {printable(name)}: {m['calls']} calls · {m['input_tokens']:,} in / "
            f"{m['output_tokens']:,} out · {format_usd(m['cost_usd'])}"
        )
    return "\n".join(lines)


def status(ctx: Ctx, session: str, as_json: bool) -> None:
    """Print a session's status (and its recovery notice until dismissed)."""
    info = ctx.store.session(session)
    d = status_dict(ctx.store, info)
    if as_json:
        emit_json(d)
        return
    usage: Any = d["usage"]
    turns, events = cast(int, d["turns"]), cast(int, d["events"])
    echo(
        f"{info.id}  {d['status']}  ({turns} turn{'' if turns == 1 else 's'}, "
        f"{events} event{'' if events == 1 else 's'})"
    )
    if d["reason"]:
        echo(f"  {printable(str(d['reason']))}")
    if d["status"] == "blocked":
        echo("  " + FORCE_HINT.format(session=info.id))
    if d["waiting"] is not None:
        from bubu.log import readview

        w = readview.load(ctx.store, info.id).longrun.waiting()
        if w is not None:
            from bubu import clock

            echo(f"  {waiting_line(w, clock.now_ms())}")
            echo(f"    last error: {printable(w.message)}")
    echo(f"  {usage_line(usage)}")
    from bubu.pricing import known

    load_prices()
    echo(cost_lines(usage, priced=bool(info.model) and known(info.model or "")))
    changed: Any = d["changed"]
    if changed:
        echo(f"  changed by this turn so far ({len(changed)}): " + printable("; ".join(changed)))
    if d["plan"]:
        echo(plan_text(d["plan"]))  # type: ignore[arg-type]  # plan_json made it
    _children_text(d)
    if d["plan_mode"]:
        echo(f"  plan mode: `bubu approve-plan {info.id}` lets it act on the plan")
    procs: Any = d["processes"]
    for p in procs:
        echo(f"  background {p['handle']} (pid {p['pid']}): {printable(str(p['command']))}")
    rec: Any = d["recovery"]
    if rec and not rec["dismissed"]:
        from bubu.log import readview

        st = readview.load(ctx.store, info.id).status
        assert st.notice is not None
        echo("  recovery notice:")
        ongoing = st.state in ("open", "queued")  # else the recovered turn has ended since
        for ln in printable(notice_text(st.notice, ongoing=ongoing)).splitlines():
            echo("    " + ln)


def plan_text(plan: Sequence[dict[str, str]]) -> str:
    """The plan for `bubu status`: ``  plan 2/5`` and one checklist line per step."""
    items = plan_items(list(plan))
    if isinstance(items, str):
        return f"  plan: {printable(items)}"
    lines = [f"  plan {plan_counts(items)}", *(f"    {ln}" for ln in plan_lines(items))]
    return printable("\n".join(lines))  # the model wrote the steps
