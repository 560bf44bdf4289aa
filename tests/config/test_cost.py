"""The money a turn costs: priced from real `genai-prices` data when the usage is committed, shown
as unknown (never $0) for models the table does not know, and `--max-cost` as a resumable stop."""

from __future__ import annotations

from pathlib import Path

import pytest
from genai_prices import Usage, calc_price

from bubu.engine.driver import RunConfig
from bubu.engine.session import new_session, resume_turn, start_turn
from bubu.events import Record, TokenUsage
from bubu.log.sqlite import SQLiteStore
from bubu.pricing import call_cost
from bubu.providers.anthropic import AnthropicProvider
from bubu.providers.openai import OpenAIProvider
from engine.cli import bubu, bubu_json, only_session
from engine.helpers import FAST, make_host, turn_end, write_script
from providers.wire import ANTHROPIC_KEY, OPENAI_KEY, Wire, sse


@pytest.fixture(autouse=True)
def _official_endpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def usages(records: list[Record]) -> list[TokenUsage]:
    """Every committed token usage, in order."""
    return [u for r in records if r.event.actions and (u := r.event.actions.token_usage)]


def test_an_openai_call_is_priced_with_its_cache_reads(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    wire = Wire([sse("openai_text.sse")])
    provider = OpenAIProvider("gpt-4.1", api_key=OPENAI_KEY, http_client=wire.client())
    info = new_session(sqlite_store, task="hi", workspace=str(tmp_path), model=provider.spec)
    assert start_turn(make_host(sqlite_store, provider), info, "hi") == "completed"
    (u,) = usages(sqlite_store.read(info.id))
    # The fixture: 1,250 input tokens of which 1,024 cached, 6 output tokens; gpt-4.1 costs
    # $2/M input, $0.50/M cached input and $8/M output.
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens) == (1250, 1024, 6)
    assert u.cost_usd == pytest.approx((226 * 2 + 1024 * 0.5 + 6 * 8) / 1e6)
    expected = calc_price(
        Usage(input_tokens=1250, cache_read_tokens=1024, output_tokens=6), "gpt-4.1"
    )
    assert u.cost_usd == pytest.approx(float(expected.total_price))


def test_an_anthropic_call_is_priced_and_cache_writes_cost_more() -> None:
    plain = call_cost("anthropic:claude-haiku-4-5", input_tokens=10_000, output_tokens=100)
    written = call_cost(
        "anthropic:claude-haiku-4-5",
        input_tokens=10_000,
        output_tokens=100,
        cache_write_tokens=10_000,
    )
    read = call_cost(
        "anthropic:claude-haiku-4-5",
        input_tokens=10_000,
        output_tokens=100,
        cache_read_tokens=10_000,
    )
    assert plain is not None
    assert written is not None
    assert read is not None
    assert read < plain < written


def test_an_anthropic_wire_call_records_its_cost(sqlite_store: SQLiteStore, tmp_path: Path) -> None:
    wire = Wire([sse("anthropic_text.sse")])
    provider = AnthropicProvider(
        "claude-haiku-4-5", api_key=ANTHROPIC_KEY, http_client=wire.client()
    )
    info = new_session(sqlite_store, task="hi", workspace=str(tmp_path), model=provider.spec)
    assert start_turn(make_host(sqlite_store, provider), info, "hi") == "completed"
    (u,) = usages(sqlite_store.read(info.id))
    assert u.cost_usd is not None
    assert u.cost_usd > 0


def test_unknown_models_have_no_price() -> None:
    assert call_cost("scripted:/tmp/x.jsonl", input_tokens=10, output_tokens=10) is None
    assert call_cost("openai:no-such-model-anywhere", input_tokens=10, output_tokens=10) is None
    # A local OpenAI-compatible server is not OpenAI: its price is unknown whatever the name.
    assert call_cost("openai:gpt-4.1", input_tokens=10, output_tokens=10, official=False) is None


@pytest.mark.heavy
def test_status_and_sessions_say_the_price_is_unknown_for_a_scripted_model(tmp_path: Path) -> None:
    db = tmp_path / "bubu.db"
    script = write_script(tmp_path / "m.jsonl", [{"text": "done"}])
    done = bubu(db, "run", "-w", str(tmp_path), "-m", f"scripted:{script}", "--jsonl", "hi")
    assert done.returncode == 0, done.stderr
    sid = only_session(db)
    usage = bubu_json(db, "status", sid, "--json")["usage"]
    assert usage["cost_usd"] is None
    assert usage["unpriced_calls"] == 1
    assert usage["by_model"][f"scripted:{script}"]["cost_usd"] is None
    text = bubu(db, "status", sid).stdout
    assert "price unknown" in text
    assert "$0.00" not in text
    (row,) = bubu_json(db, "sessions", "--json")
    assert row["cost_usd"] is None
    assert row["cost"] == "price unknown"
    assert "price unknown" in bubu(db, "sessions").stdout


def test_max_cost_stops_the_turn_and_resume_with_a_higher_limit_continues(
    sqlite_store: SQLiteStore, tmp_path: Path
) -> None:
    (tmp_path / "app.py").write_text("print('hi')\n")
    wire = Wire([sse("openai_tool_call.sse"), sse("openai_text.sse")])
    provider = OpenAIProvider("gpt-4.1", api_key=OPENAI_KEY, http_client=wire.client())
    info = new_session(sqlite_store, task="read", workspace=str(tmp_path), model=provider.spec)
    capped = RunConfig(backoff_s=0.001, max_cost=0.0001)
    assert start_turn(make_host(sqlite_store, provider, config=capped), info, "read") == "stopped"
    records = sqlite_store.read(info.id)
    end = turn_end(records)
    assert end.message is not None
    assert "cost limit of $0.0001" in end.message
    assert len(usages(records)) == 1  # the limit was checked before the second call
    # Resuming under the same recorded limit stops again at once, without a model call.
    assert resume_turn(make_host(sqlite_store, provider), info) == "stopped"
    assert len(wire.requests) == 1
    raised = RunConfig(backoff_s=0.001, max_cost=1.0)
    assert resume_turn(make_host(sqlite_store, provider, config=raised), info) == "completed"
    assert len(usages(sqlite_store.read(info.id))) == 2
    assert FAST.max_cost is None


@pytest.mark.heavy
def test_a_bad_max_cost_is_refused_in_one_line(tmp_path: Path) -> None:
    for bad in ("-3", "0", "abc", "nan", "inf"):
        done = bubu(tmp_path / "bubu.db", "run", "-m", "scripted:x", "--max-cost", bad, "hi")
        assert done.returncode == 2
        assert done.stderr.splitlines() == [
            "bubu: error: --max-cost takes a number of US dollars above 0 (e.g. --max-cost 2.50), "
            f"got {bad!r}"
        ]
    assert not (tmp_path / "bubu.db").exists()
