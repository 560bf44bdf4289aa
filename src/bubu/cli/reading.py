"""The bodies of `bubu sessions`, `bubu log` and `bubu verify`, free of click: the click
commands (`bubu.cli.logcmds`) and the fast path (`bubu.cli.fast`) both run them, so both print
the same."""

from __future__ import annotations

import sys

from bubu.cli import term
from bubu.cli.core import Ctx, echo, emit_json
from bubu.cli.states import shown_state
from bubu.cli.term import printable
from bubu.errors import BubuError
from bubu.log import codec
from bubu.log.store import SessionInfo, Store, VerifyReport
from bubu.projections.status import BOUNDARY_KINDS, Status, fold_status


def session_status(store: Store, info: SessionInfo) -> Status:
    """The status of a session folded from its boundary events only."""
    return fold_status(store.read(info.id, kinds=BOUNDARY_KINDS))


def _session_row(store: Store, info: SessionInfo) -> dict[str, object]:
    from bubu.pricing import CostTally, known

    # A model call's usage rides on its response's last event: a text, a call or a thinking.
    records = store.read(info.id, kinds=(*BOUNDARY_KINDS, "function_call", "thinking"))
    st = fold_status(records)
    cost = CostTally(priced=bool(info.model) and known(info.model or ""))
    for r in records:
        if r.event.actions is not None and (u := r.event.actions.token_usage) is not None:
            cost.add(u.model, u.cost_usd, u.input_tokens, u.output_tokens)
    from bubu.log.verify import verify_chain

    # The chain alone (no decoding): cheap enough for a listing, and what a run checks first.
    chain = verify_chain(info.id, store.raw(info.id))
    return {
        "id": info.id,
        "title": info.title,
        "workspace": info.workspace,
        "model": info.model,
        "created_ms": info.created_ms,
        "last_ms": info.last_ms,
        "events": info.high_water,
        "status": shown_state(store, info, st),
        "turns": st.turns,
        "cost_usd": cost.total,
        "cost": cost.text(),
        "verified": chain.ok,
        "integrity": None if chain.ok else f"seq {chain.first_bad_seq}: {chain.problem}",
        "parent": _parent(store, info),
    }


def _parent(store: Store, info: SessionInfo) -> str | None:
    """The session a sub-agent's session was started by (None: it is no sub-agent)."""
    from bubu.events import SessionStarted, SystemNote

    try:
        records = store.read(info.id, kinds=("session_started",))
    except BubuError:  # a damaged row: the listing says so in its integrity column
        return None
    for r in records:
        c = r.event.content
        if isinstance(c, SystemNote) and isinstance(c.note, SessionStarted) and c.note.parent:
            return c.note.parent
    return None


def as_tree(rows: list[dict[str, object]]) -> list[tuple[int, dict[str, object]]]:
    """The rows with each sub-agent right under its parent, and how deep it is."""
    ids = {r["id"] for r in rows}
    kids: dict[object, list[dict[str, object]]] = {}
    for r in rows:
        kids.setdefault(r["parent"] if r.get("parent") in ids else None, []).append(r)
    out: list[tuple[int, dict[str, object]]] = []

    def walk(parent: object, depth: int) -> None:
        for r in kids.get(parent, []):
            out.append((depth, r))
            walk(r["id"], depth + 1)

    walk(None, 0)
    return out


def sessions(ctx: Ctx, as_json: bool, status_filter: str | None, text: str | None) -> None:
    """List sessions, newest first, with their status derived from the log."""
    found = None
    if text is not None:
        from bubu.log.search import matching

        found = matching(ctx.store, text)
    infos = [s for s in ctx.store.sessions() if found is None or s.id in found]
    from bubu.cli.prices import load_prices

    load_prices()
    rows = [_session_row(ctx.store, s) for s in infos]
    for r in rows:
        if found is not None:
            r["match"] = found[str(r["id"])]
    if status_filter:
        rows = [r for r in rows if r["status"] == status_filter]
    if as_json:
        emit_json(rows)
        return
    if not rows:
        if text is not None:
            where = f" among the {status_filter} sessions" if status_filter else ""
            echo(f"no session matches {text!r}{where}")
            return
        if status_filter and infos:
            n = len(infos)
            echo(
                f"no {status_filter} sessions ({n} session{'s' if n != 1 else ''} in other "
                "states; `bubu sessions` lists them all)"
            )
            return
        echo('no sessions yet; start one with `bubu run "TASK"` or try `bubu demo`')
        return
    for depth, r in as_tree(rows):
        title = printable(str(r["title"]).replace("\n", " "))
        if len(title) > 50:
            title = title[:49] + "…"
        lead = "  " * (depth - 1) + "└ " if depth else ""
        echo(
            f"{lead}{r['id']}  {r['status']:<10} {r['events']:>6} events  {r['cost']:>13}  {title}"
        )
        if not r["verified"]:
            term.echo(
                f"    does not verify at {r['integrity']}; it is not continued (`bubu verify`)"
            )
        match = r.get("match")
        if isinstance(match, dict):
            echo(printable(f"    seq {match['seq']}: {match['snippet']}"))


def log(ctx: Ctx, session: str, jsonl: bool, after: int) -> None:
    """Print a session's events in seq order."""
    info = ctx.store.session(session)
    records = ctx.store.read(info.id, after=after)
    from bubu.events import kind_of

    for r in records:
        if jsonl:
            line = (
                b'{"event":'
                + codec.encode(r.event)
                + f',"hash":"{r.hash}","seq":{r.seq}}}'.encode()
            )
            sys.stdout.buffer.write(line + b"\n")
        else:
            echo(f"{r.seq:>6}  {r.hash[:12]}  {r.event.role:<6} {kind_of(r.event)}")
    sys.stdout.flush()


def _runner_checked(store: Store, report: VerifyReport) -> VerifyReport:
    """`report`, checked against the session's runner snapshot where it has one: the runner's
    folds (and their imports) are loaded only then."""
    from bubu.log.verify import RUNNER_VIEW, RUNNER_VIEW_KEY

    held: object
    try:
        held = report.ok and store.get_view(RUNNER_VIEW, report.session, RUNNER_VIEW_KEY)
    except (BubuError, TypeError, ValueError):
        held = True  # the check itself says what is wrong with it
    if not held:
        return report
    from bubu.engine import reload

    return reload.check(store, report)


def verify(ctx: Ctx, session: str | None, as_json: bool) -> None:
    """Recompute the hash chain of one session (or all); exit 1 if anything is wrong."""
    store = ctx.store
    targets = [store.session(session)] if session else store.sessions()
    from bubu.log import readview

    # The log first; then the snapshots of the session view and of the runner's state, caches
    # of it that must agree with it.
    reports = [_runner_checked(store, readview.check(store, store.verify(t.id))) for t in targets]
    integrity = getattr(store, "integrity_check", None)
    db_ok = integrity() if integrity is not None else "ok"
    ok = all(r.ok for r in reports) and db_ok == "ok"
    if as_json:
        emit_json({"ok": ok, "database": db_ok, "sessions": reports})
    else:
        for r in reports:
            if r.ok:
                echo(f"ok    {r.session}  {r.high_water} events  {r.digest[:16]}")
            else:
                term.echo(f"BAD   {r.session}  at seq {r.first_bad_seq}: {r.problem}")
        if db_ok != "ok":
            echo(f"BAD   database: {db_ok}")
        if not reports:
            echo("no sessions to verify")
    if not ok:
        sys.exit(1)
