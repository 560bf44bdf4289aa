"""Any model can be priced: `[prices."provider:model"]` in the user's config feeds the same cost
path as the `genai-prices` table, so `--max-cost` binds on a local server; an unpriced model is
"price unknown" before its first call too, and `--max-cost` says once that it cannot bind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bubu.errors import ConfigError
from bubu.events import Record, SystemNote, TokenUsage, TurnEnded
from bubu.pricing import CostTally, Price, call_cost, configure, known
from bubu.settings import resolve
from faults.helpers import bubu, read
from providers.servers import serve, stream_file

CHAT = ("POST", "/v1/chat/completions")
PRICE = '[prices."openai:local"]\ninput = 1.0\noutput = 1000.0\ncache_read = 0.5\n'


@pytest.fixture(autouse=True)
def _no_prices() -> Iterator[None]:
    configure({})
    yield
    configure({})


def test_a_configured_price_is_used_at_any_server_with_its_cache_rates() -> None:
    assert call_cost("openai:local", input_tokens=100, output_tokens=10, official=False) is None
    configure({"openai:local": Price(input=1.0, output=1000.0, cache_read=0.5)})
    cost = call_cost(
        "openai:local",
        input_tokens=1_000_000,
        output_tokens=1000,
        cache_read_tokens=400_000,
        official=False,
    )
    # 600k fresh at $1/M, 400k cached at $0.5/M, 1k out at $1000/M.
    assert cost == pytest.approx(0.6 + 0.2 + 1.0)
    assert known("openai:local", official=False)


def test_the_config_key_is_checked_and_only_the_users_file_may_set_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    (ws / ".bubu").mkdir(parents=True)
    home.mkdir()
    monkeypatch.setenv("BUBU_HOME", str(home))
    (home / "config.toml").write_text(PRICE)
    got = resolve(workspace=None, flags={}, defaults={}).values["prices"].value
    assert got == {"openai:local": {"input": 1.0, "output": 1000.0, "cache_read": 0.5}}
    (home / "config.toml").write_text('[prices."openai:local"]\ninput = 1.0\n')
    with pytest.raises(ConfigError, match=r"needs output \(USD per million tokens\)"):
        resolve(workspace=None, flags={}, defaults={})
    (home / "config.toml").write_text('[prices."openai:local"]\ninput = 1\noutput = 2\ncost = 3\n')
    with pytest.raises(ConfigError, match="unknown field 'cost'"):
        resolve(workspace=None, flags={}, defaults={})
    (home / "config.toml").write_text("")
    (ws / ".bubu" / "config.toml").write_text(PRICE)
    # A repository may not price its own model: the key is ignored, and said.
    s = resolve(workspace=ws, flags={}, defaults={})
    assert [(i.key, i.kind) for i in s.ignored] == [("prices", "user_only")]
    assert s.values["prices"].source == "default"


def test_no_call_yet_is_zero_only_for_a_model_with_a_price() -> None:
    assert CostTally().text() == "price unknown"
    assert CostTally(priced=True).text() == "$0"


def _usages(records: list[Record]) -> list[TokenUsage]:
    return [u for r in records if r.event.actions and (u := r.event.actions.token_usage)]


@pytest.mark.heavy
def test_max_cost_binds_on_a_local_server_with_a_configured_price(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(PRICE)  # BUBU_HOME is the database's directory
    ws, db = tmp_path / "ws", tmp_path / "bubu.db"
    ws.mkdir()
    # Each call: 100 in, 10 out: $0.0001 + $0.01 at the configured price.
    answers = [stream_file("compatible_missing_file.sse")] * 4 + [
        stream_file("compatible_text.sse")
    ]
    with serve({CHAT: answers}) as s:
        done = bubu(
            db,
            "run",
            "go",
            "-w",
            str(ws),
            "-m",
            "openai:local",
            "--base-url",
            f"{s.url}/v1",
            "--max-cost",
            "0.025",
        )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "cannot limit it" not in done.stderr
    records = read(db)
    costs = [u.cost_usd for u in _usages(records)]
    assert costs
    assert costs[0] == pytest.approx(0.0101)
    ends = [
        c.note
        for r in records
        if isinstance(c := r.event.content, SystemNote) and isinstance(c.note, TurnEnded)
    ]
    assert ends[-1].reason == "stopped"
    assert (ends[-1].message or "").startswith("the cost limit of $0.025 was reached")
    shown = bubu(db, "sessions")
    assert "$0.0" in shown.stdout


@pytest.mark.heavy
def test_max_cost_with_an_unpriced_model_says_once_it_cannot_bind(tmp_path: Path) -> None:
    ws, db = tmp_path / "ws", tmp_path / "bubu.db"
    ws.mkdir()
    with serve({CHAT: stream_file("compatible_text.sse")}) as s:
        done = bubu(
            db,
            "run",
            "go",
            "-w",
            str(ws),
            "-m",
            "openai:local",
            "--base-url",
            f"{s.url}/v1",
            "--max-cost",
            "1",
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.count("cannot limit it") == 1
    assert '[prices."openai:local"]' in done.stderr
    assert "price unknown" in bubu(db, "sessions").stdout


def test_compact_to_must_be_below_compact_at() -> None:
    from bubu.cli.agentcmds import context_policy

    assert context_policy(None, None).compact_to == 0.3
    assert context_policy(0.5, None).compact_to == 0.25, "half the trigger when only it is set"
    with pytest.raises(ConfigError, match=r"compact_to \(0.6\) must be below compact_at \(0.5\)"):
        context_policy(0.5, 0.6)
