"""Commands for sessions run elsewhere or crashed: stop, recover, dismiss."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from bubu import clock
from bubu.cli import shutdown
from bubu.cli.agentcmds import EXIT, model_options, observer_for, signals
from bubu.cli.app import Ctx, cli, emit_json, fail, pass_ctx
from bubu.cli.render import TerminalObserver
from bubu.cli.settling import announce
from bubu.cli.term import echo
from bubu.engine.driver import owner_id
from bubu.engine.recovery import recover_session
from bubu.engine.scope import session_free
from bubu.errors import BubuError
from bubu.events import NoticeDismissed, SystemNote, make
from bubu.log import readview


@cli.command("recover")
@click.argument("session", required=False)
@model_options
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary at the end.")
@click.option(
    "--force",
    is_flag=True,
    help="Continue a blocked SESSION: every call left running "
    "gets an interrupted result, nothing is re-run (look at it first).",
)
@pass_ctx
def recover_cmd(ctx: Ctx, /, session: str | None, as_json: bool, force: bool, **opts: Any) -> None:
    """Recover every session with an unfinished turn (or just SESSION) and continue it to its end.

    Each continues with the settings its turn recorded (model, server, limits); a flag given
    here changes that setting. An imported or forked session is recovered only when named."""
    from bubu.cli.agentcmds import continuing_host
    from bubu.cli.background import say
    from bubu.cli.continuing import recover_line
    from bubu.engine.recovery import forceable, needs_recovery
    from bubu.engine.scope import session_facts

    store = ctx.store
    if force and not session:
        fail("--force continues one blocked session: name it, after a look (`bubu show SESSION`)")
    targets = [store.session(session)] if session else store.sessions()
    observer = observer_for(opts["jsonl"] or as_json)
    results: list[dict[str, object]] = []
    worst = 0
    for info in targets:
        if shutdown.requested():  # SIGTERM/SIGHUP: the rest waits for the next `bubu recover`
            break
        if not needs_recovery(store, info) and not (force and forceable(store, info)):
            if session:
                st = readview.status(store, info.id)
                results.append({"session": info.id, "outcome": "nothing", "status": st.state})
                if isinstance(observer, TerminalObserver):
                    state = (
                        "running in another process; wait for it or stop it"
                        if st.state == "open"
                        else st.state
                    )
                    observer.line(f"nothing to recover: session {info.id} is {state}")
            continue
        facts = session_facts(store, info)
        if facts.parent is not None and not session:
            continue  # a sub-agent is continued by its parent's recovery, exactly once
        if facts.adopted and not session:
            say(
                f"skipped session {info.id}: it was {facts.describe()}, so it is continued only "
                f"when named: `bubu recover {info.id}`"
            )
            results.append({"session": info.id, "outcome": "skipped", "reason": facts.describe()})
            continue
        try:
            host, acting, _ = continuing_host(store, info, opts, observer)
        except BubuError as e:
            if session:
                raise
            # One session that cannot be continued here must not stop the others.
            say(f"could not recover session {info.id}: {e}")
            results.append({"session": info.id, "outcome": "error", "reason": str(e)})
            worst = max(worst, 1)
            continue
        if isinstance(observer, TerminalObserver):
            observer.line(recover_line(acting, facts.describe() if facts.adopted else None))
            announce(observer.line)
        with signals(host):
            rec = recover_session(host, info, force=force)
        code = 5 if rec.outcome in ("blocked", "busy") else EXIT.get(rec.outcome, 0)
        worst = max(worst, code)
        results.append(
            {
                "session": info.id,
                "outcome": rec.outcome,
                "plan": rec.plan.kind,
                "reason": rec.plan.reason,
                "calls": [
                    {
                        "call_id": c.call_id,
                        "tool": c.tool,
                        "decision": c.decision,
                        "reason": c.reason,
                    }
                    for c in rec.plan.calls
                ],
            }
        )
    if isinstance(observer, TerminalObserver):
        observer.close()
        if not results:
            click.echo("nothing to recover: no session has an unfinished turn")
    if as_json:
        emit_json(results)
    shutdown.leave(worst)
    sys.exit(worst)


@cli.command("stop")
@click.argument("session")
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(0),
    default=30.0,
    show_default=True,
    metavar="S",
    help="Seconds to wait for the turn to end (0: do not wait).",
)
@pass_ctx
def stop_cmd(ctx: Ctx, /, session: str, wait_s: float) -> None:
    """Stop the turn running in another process (a terminal, the web UI, a worker).

    The runner ends the turn `stopped`, as Ctrl-C would; `bubu resume SESSION` continues it.
    """
    store = ctx.store
    info = store.session(session)
    # A lease whose process is gone (on this machine) has nobody to hear the request.
    lease = None if session_free(store, info.id) else store.request_stop(info.id)
    if lease is None:
        state = readview.status(store, info.id).state
        hint = " (its runner is gone: `bubu recover` continues it)" if state == "open" else ""
        # Exit 2, as `bubu resume` of a turn that cannot be resumed: nothing was asked of anyone.
        fail(f"nothing is running session {info.id}; its turn is {state}{hint}", code=2)
    echo(f"asked {lease.owner} to stop session {info.id}")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        st = readview.status(store, info.id)
        if st.state != "open":
            echo(f"● turn {st.state}" + (f": {st.reason}" if st.reason else ""))
            return
        time.sleep(0.1)
    if wait_s:
        fail(f"session {info.id} is still running after {wait_s:g} s; see `bubu status {info.id}`")


@cli.command("dismiss")
@click.argument("session")
@pass_ctx
def dismiss_cmd(ctx: Ctx, /, session: str) -> None:
    """Dismiss the session's recovery notice (the continuation is not affected)."""
    store = ctx.store
    info = store.session(session)
    st = readview.status(store, info.id)
    if st.notice_seq is None or st.notice_dismissed:
        click.echo("no recovery notice to dismiss")
        return
    free = session_free(store, info.id)
    lease = store.acquire_lease(info.id, owner_id(), 10, steal=False) if free else None
    head = store.head(info.id)
    ev = make(
        session=info.id,
        turn=None,
        role="system",
        author="user",
        ts=clock.now_ms(),
        content=SystemNote(note=NoticeDismissed(notice_seq=st.notice_seq)),
        visibility="hidden",
    )
    try:
        store.append(info.id, [ev], expect=head.high_water, durable=True, lease=lease)
    finally:
        if lease is not None:
            store.release_lease(lease)
    click.echo(f"dismissed the recovery notice of {info.id}")
