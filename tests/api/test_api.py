"""The Python API: an Agent over a scripted model, real SQLite files and decorated tools."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from pathlib import Path

import pytest

from bubu import Agent, Policy, RunResult, ToolContext, tool
from bubu.engine.driver import RunConfig
from bubu.engine.permissions import Answer
from bubu.errors import ConfigError, UnknownSession
from bubu.events import PermissionRequest, Record, Text
from bubu.log.sqlite import SQLiteStore
from bubu.projections.recovery import INTERRUPTED
from bubu.providers.base import ToolResultsMessage
from bubu.providers.scripted import ScriptedProvider

from .conftest import Script
from .helpers import Recording, call, kinds, outcomes

FAST = RunConfig(backoff_s=0.001, backoff_max_s=0.01, tool_timeout_s=30.0)


@tool(effect="read_only")
def word_count(path: str, ctx: ToolContext) -> str:
    """Count the words of a file in the workspace.

    Args:
        path: The file, relative to the workspace.
    """
    return str(len((ctx.workspace / path).read_text().split()))


@tool(effect="provable_write", target=lambda a: a["path"], content=lambda a: a["text"])
def save(path: str, text: str) -> None:
    """Save text to a file."""


class Crash(BaseException):
    """Stands in for the process dying mid-tool: no handler in the engine catches it."""


def _texts(records: list[Record]) -> list[str]:
    return [c.text for r in records if isinstance(c := r.event.content, Text)]


def test_run_returns_how_the_turn_ended(script: Script, db: Path, ws: Path) -> None:
    model = script(
        [
            {
                "tool_calls": [
                    call("word_count", path="a.txt"),
                    call("save", path="out.txt", text="1 word"),
                ]
            },
            {"text": "a.txt has 1 word; saved."},
        ]
    )
    with Agent(model=model, tools=[word_count, save], store=db, workspace=ws, config=FAST) as agent:
        result = agent.run("count the words")
        view = agent.session(result.session)
        assert [s.id for s in agent.sessions()] == [result.session]
        assert view.status().state == "completed"
        assert {c.name: c.result for c in view.results().values()} == {
            "word_count": "1",
            "save": "wrote out.txt.",
        }
        shown = [i.kind for i in view.transcript().items if i.kind != "note"]
        assert shown == ["user", "tool", "tool", "assistant"]
    assert result == RunResult(
        session=result.session,
        turn=result.turn,
        reason="completed",
        text="a.txt has 1 word; saved.",
        usage=result.usage,
        high_water=result.high_water,
    )
    assert result.ok
    assert result.turn is not None
    assert result.usage.model_calls == 2
    assert result.usage.output_tokens > 0
    assert (ws / "out.txt").read_text() == "1 word"
    with SQLiteStore(db) as store:
        assert store.head(result.session).high_water == result.high_water
        assert store.session(result.session).model == model


def test_follow_up_turns_share_the_session(script: Script, db: Path, ws: Path) -> None:
    model = script([{"text": "one"}, {"text": "two"}, {"text": "three"}])
    with Agent(model=model, store=db, workspace=ws) as agent:
        with pytest.raises(ConfigError, match="no session to continue"):
            agent.continue_("too early")
        first = agent.run("first")
        second = agent.continue_("second")
        third = agent.run("third", session=first.session[:10])
        with pytest.raises(UnknownSession):
            agent.run("x", session="ses_nope")
        records = agent.session().records()
    assert [first.text, second.text, third.text] == ["one", "two", "three"]
    assert first.session == second.session == third.session
    assert len({first.turn, second.turn, third.turn}) == 3
    assert _texts(records) == ["first", "one", "second", "two", "third", "three"]


def test_a_custom_system_prompt_reaches_the_model(script: Script, db: Path, ws: Path) -> None:
    model = script([{"text": "ok"}, {"text": "ok"}])
    custom = Recording(ScriptedProvider(model.partition(":")[2]))
    with Agent(model=custom, system_prompt="You are a test.", store=db, workspace=ws) as agent:
        agent.run("hi")
    default = Recording(ScriptedProvider(model.partition(":")[2]))
    with Agent(model=default, store=db, workspace=ws) as agent:
        agent.run("hi")
    assert [r.system for r in custom.requests] == ["You are a test."]
    assert default.requests[0].system.startswith("You are Bubu")
    assert str(ws) in default.requests[0].system


def test_start_runs_in_the_background_and_events_follow_the_log(
    script: Script, db: Path, ws: Path
) -> None:
    gate = threading.Event()

    @tool(effect="read_only")
    def wait_for_gate() -> str:
        """Wait until the test opens the gate."""
        gate.wait(30)
        return "through"

    model = script([{"tool_calls": [call("wait_for_gate")]}, {"text": "done"}, {"text": "again"}])
    with Agent(model=model, tools=[wait_for_gate], store=db, workspace=ws) as agent:
        run = agent.start("go")
        seen: list[str] = []
        for record in run.events():
            seen.append(kinds([record])[0])
            if seen[-1] == "tool_dispatch":
                assert not run.done()
                gate.set()
        result = run.wait(30)
        assert seen[:3] == ["text", "turn_started", "run_started"]
        assert seen[-3:] == ["model_request", "text", "turn_ended"]
        assert result.text == "done"
        # A finished session is read to its end; after its high-water, the next turn is awaited.
        assert kinds(agent.events(run.session)) == seen
        later: list[Record] = []
        follower = threading.Thread(
            target=lambda: later.extend(agent.events(run.session, after=result.high_water))
        )
        follower.start()
        agent.continue_("once more")
        follower.join(30)
        assert _texts(later) == ["once more", "again"]
        assert kinds(agent.events(run.session, follow=False))[-1] == "turn_ended"


def test_stop_then_resume(script: Script, db: Path, ws: Path) -> None:
    running = threading.Event()

    @tool(effect="side_effecting")
    def long_job(ctx: ToolContext) -> str:
        """A job that runs until it is cancelled."""
        running.set()
        ctx.cancel.wait(30)
        return "cancelled"

    model = script([{"tool_calls": [call("long_job")]}, {"text": "picked up again"}])
    with Agent(model=model, tools=[long_job], store=db, workspace=ws) as agent:
        run = agent.start("work")
        assert running.wait(30)
        run.stop()
        stopped = run.wait(30)
        resumed = agent.resume(run.session)
        records = agent.session(run.session).records()
    assert stopped.reason == "stopped"
    assert resumed.reason == "completed"
    assert resumed.text == "picked up again"
    assert resumed.turn == stopped.turn
    assert [c.result for cs in outcomes(records).values() for c in cs] == ["cancelled"]


def test_the_async_twins(script: Script, db: Path, ws: Path) -> None:
    model = script([{"text": "first"}, {"text": "second"}, {"text": "third"}])

    async def main(agent: Agent) -> tuple[RunResult, RunResult, list[str], RunResult]:
        first = await agent.arun("one")
        second = await agent.acontinue("two")
        seen = [kinds([r])[0] async for r in agent.aevents(first.session)]
        run = agent.start("three", session=first.session)
        streamed = [kinds([r])[0] async for r in run.aevents()]
        third = await run.await_result()
        assert streamed[-1] == "turn_ended"
        return first, second, seen, third

    with Agent(model=model, store=db, workspace=ws) as agent:
        first, second, seen, third = asyncio.run(main(agent))
    assert (first.text, second.text, third.text) == ("first", "second", "third")
    assert seen.count("turn_ended") == 2


def test_recover_continues_a_crashed_turn_with_the_same_prompt(
    script: Script, db: Path, ws: Path
) -> None:
    crashed: list[bool] = []

    @tool(effect="side_effecting")
    def deploy() -> str:
        """Deploy (the first call takes the process down)."""
        if not crashed:
            crashed.append(True)
            raise Crash
        return "deployed"

    model = script([{"tool_calls": [call("deploy")]}, {"text": "checked the deploy"}])
    provider = Recording(ScriptedProvider(model.partition(":")[2]))
    with Agent(
        model=provider, tools=[deploy], system_prompt="Be careful.", store=db, workspace=ws
    ) as agent:
        with pytest.raises(Crash):
            agent.run("deploy it")
        session = agent.sessions()[0].id
        assert agent.session(session).status().state == "open"
        result = agent.recover(session)
        nothing = agent.recover(session)
    assert result.reason == "completed"
    assert result.recovery is not None
    assert [c.decision for c in result.recovery.calls] == ["interrupted"]
    assert [r.system for r in provider.requests] == ["Be careful.", "Be careful."]
    seen = [m for m in provider.requests[-1].messages if isinstance(m, ToolResultsMessage)]
    assert [r.content[: len(INTERRUPTED)] for r in seen[-1].results] == [INTERRUPTED]
    assert "Nothing in the workspace changed" in seen[-1].results[0].content
    assert nothing.reason == "nothing"
    assert crashed == [True]  # never re-run


def test_permission_goes_to_the_asker(script: Script, db: Path, ws: Path) -> None:
    asked: list[PermissionRequest] = []

    @tool(effect="side_effecting", permission=lambda a: f"it sends mail to {a['to']}")
    def send(to: str) -> str:
        """Send a mail."""
        return f"sent to {to}"

    model = script(
        [{"tool_calls": [call("send", to="a@x"), call("send", to="b@x")]}, {"text": "k"}]
    )

    def ask(request: PermissionRequest) -> Answer | None:
        asked.append(request)
        return "allow" if "a@x" in request.reason else "deny"

    with Agent(model=model, tools=[send], store=db, workspace=ws, asker=ask) as agent:
        result = agent.run("mail both")
        got = sorted(c.result for cs in outcomes(agent.session().records()).values() for c in cs)
    assert result.ok
    assert [r.reason for r in asked] == ["it sends mail to a@x", "it sends mail to b@x"]
    assert got == ["permission denied: it sends mail to b@x", "sent to a@x"]
    with Agent(model=model, tools=[send], store=db, workspace=ws, policy=Policy(yes=True)) as agent:
        assert agent.run("mail again").ok


def test_ctrl_c_stops_the_turn_cleanly_then_interrupts(script: Script, db: Path, ws: Path) -> None:
    @tool(effect="side_effecting")
    def press_ctrl_c(ctx: ToolContext) -> str:
        """Send this process SIGINT, then wait to be cancelled."""
        os.kill(os.getpid(), signal.SIGINT)
        ctx.cancel.wait(30)
        return "cancelled"

    model = script([{"tool_calls": [call("press_ctrl_c")]}])
    # What the process had before (Python's default, or "ignore" when started in the background
    # by a shell) is what the agent leaves behind.
    before = signal.getsignal(signal.SIGINT)
    with Agent(model=model, tools=[press_ctrl_c], store=db, workspace=ws) as agent:
        with pytest.raises(KeyboardInterrupt):
            agent.run("interrupt me")
        status = agent.session().status()
    assert status.state == "stopped"
    assert signal.getsignal(signal.SIGINT) is before


def test_the_store_and_tools_are_the_callers_to_choose(script: Script, db: Path, ws: Path) -> None:
    model = script([{"text": "fine"}])
    with SQLiteStore(db) as store:
        agent = Agent(model=model, store=store, workspace=ws, builtin_tools=False, tools=[save])
        assert list(agent.tools) == ["save"]
        agent.run("x")
        agent.close()
        assert len(store.sessions()) == 1  # still open: the agent did not own it
    with pytest.raises(ConfigError, match="two tools are named 'save'"):
        Agent(model=model, store=db, tools=[save, save])
    with pytest.raises(ConfigError, match="not provider:model"):
        Agent(model="gpt", store=db)
    with Agent(model=model, store=str(db), workspace=ws) as agent:
        assert agent.sessions()[0].workspace == str(ws)
