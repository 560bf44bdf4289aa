"""One rule for a repeated identical error on every wire: the same 500 to the same request ends
the turn (resumably) only once the server has shown it is up, and a proxy's failure to reach its
backend is an outage, waited out. Real adapters of the three wires over a real local HTTP server,
the real engine and a real SQLite log.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from bubu.engine.attempts import (
    SAME_ANSWER_LIMIT,
    SAME_ANSWER_WINDOW_S,
    End,
    Knobs,
    Retry,
    after_failure,
)
from bubu.engine.session import new_session, start_turn
from bubu.errors import ProviderError
from bubu.events import Error, Record
from bubu.log.sqlite import SQLiteStore
from bubu.projections.longrun import LongRunFold
from bubu.providers.anthropic import AnthropicProvider
from bubu.providers.base import Provider, close_provider
from bubu.providers.openai import OpenAIProvider
from bubu.providers.openai_responses import OpenAIResponsesProvider
from providers.servers import Answer, LocalServer, serve, stream_file

from .helpers import make_host, turn_end

MODELS_UP = Answer(200, b'{"object":"list","data":[{"id":"local","object":"model"}]}')
# LiteLLM's answer when its backend is down (observed: every call, the same words).
UPSTREAM = "litellm.InternalServerError: InternalServerError: OpenAIException - Connection error."
# llama-cpp-python's answer to a message its schema refuses (the same 500 every time).
BROKEN = "7 validation errors for CreateChatCompletionRequest"


@dataclass(frozen=True, slots=True, kw_only=True)
class Wire:
    """One wire: its POST path, a text answer, its error body, and the adapter."""

    name: str
    path: str
    text: Answer
    error: Callable[[str], Answer]
    adapter: Callable[[str], Provider]


def _openai_500(message: str) -> Answer:
    body = {"error": {"message": message, "type": "internal_server_error", "code": "500"}}
    return Answer(500, json.dumps(body).encode())


def _anthropic_500(message: str) -> Answer:
    return Answer(
        500,
        json.dumps({"type": "error", "error": {"type": "api_error", "message": message}}).encode(),
    )


WIRES = [
    Wire(
        name="chat",
        path="/v1/chat/completions",
        text=stream_file("compatible_text.sse"),
        error=_openai_500,
        adapter=lambda url: OpenAIProvider("local", base_url=f"{url}/v1"),
    ),
    Wire(
        name="messages",
        path="/v1/messages",
        text=stream_file("anthropic_text.sse"),
        error=_anthropic_500,
        adapter=lambda url: AnthropicProvider("local", base_url=url),
    ),
    Wire(
        name="responses",
        path="/v1/responses",
        text=stream_file("responses_text.sse"),
        error=_openai_500,
        adapter=lambda url: OpenAIResponsesProvider("local", base_url=f"{url}/v1"),
    ),
]


@pytest.fixture(params=WIRES, ids=lambda w: w.name)
def wire(request: pytest.FixtureRequest) -> Wire:
    """Each row runs once per wire."""
    chosen: Wire = request.param
    return chosen


def _turn(
    store: SQLiteStore, ws: Path, wire: Wire, answers: list[Answer], models: Answer
) -> tuple[str | None, list[Record], LocalServer]:
    routes: dict[tuple[str, str], Answer | list[Answer]] = {
        ("POST", wire.path): answers,
        ("GET", "/v1/models"): models,
    }
    with serve(routes) as server:
        provider = wire.adapter(server.url)
        try:
            info = new_session(store, task="do it", workspace=ws, model=provider.spec)
            reason = start_turn(make_host(store, provider), info, "do it")
        finally:
            close_provider(provider)
        return reason, store.read(info.id), server


def _errors(records: list[Record]) -> list[Error]:
    return [c for r in records if isinstance(c := r.event.content, Error)]


def test_the_same_500_from_a_server_that_is_up_ends_the_turn_resumably_on_every_wire(
    sqlite_store: SQLiteStore, ws: Path, wire: Wire
) -> None:
    reason, records, server = _turn(sqlite_store, ws, wire, [wire.error(BROKEN)], MODELS_UP)
    assert reason == "failed"
    assert len(server.bodies(wire.path)) == SAME_ANSWER_LIMIT
    assert server.paths().count("GET /v1/models") >= SAME_ANSWER_LIMIT, "asked if it is up"
    end = turn_end(records)
    assert end.cause == "provider_unavailable"
    assert f"gave this same answer {SAME_ANSWER_LIMIT} times in a row" in (end.message or "")


def test_a_proxys_upstream_connection_error_is_an_outage_on_every_wire(
    sqlite_store: SQLiteStore, ws: Path, wire: Wire
) -> None:
    down = wire.error(UPSTREAM)
    answers = [down] * (SAME_ANSWER_LIMIT + 3) + [wire.text]
    reason, records, _ = _turn(sqlite_store, ws, wire, answers, MODELS_UP)
    assert reason == "completed", "waited out, however often the same words came"
    assert len(_errors(records)) == SAME_ANSWER_LIMIT + 3
    assert all("Connection error" in e.message for e in _errors(records))


def test_the_same_500_from_a_server_not_shown_up_is_waited_out_on_every_wire(
    sqlite_store: SQLiteStore, ws: Path, wire: Wire
) -> None:
    # Every request fails, the probe too: nothing shows the server is up, so it is an outage.
    broken = wire.error(BROKEN)
    answers = [broken] * (SAME_ANSWER_LIMIT + 2) + [wire.text]
    reason, records, _ = _turn(sqlite_store, ws, wire, answers, wire.error(BROKEN))
    assert reason == "completed"
    assert len(_errors(records)) == SAME_ANSWER_LIMIT + 2


def _after(*, up: bool, waited_s: float) -> Retry | End:
    e = ProviderError(
        "the server returned a server error (500)",
        status=500,
        retryable=True,
        error_class="server_error",
    )
    e.repeats_for_the_request, e.server_up = True, up
    last = Error(error_class="server_error", message=str(e), retryable=True, status=500)
    fold = LongRunFold(
        open=True,
        streak=SAME_ANSWER_LIMIT - 1,
        since_ms=0,
        last_error=last,
        same_in_a_row=SAME_ANSWER_LIMIT - 1,
    )
    return after_failure(
        e,
        attempt=SAME_ANSWER_LIMIT,
        fold=fold,
        knobs=Knobs(),
        primary="m",
        current="m",
        now_ms=int(waited_s * 1000),
        session="s",
        rand=lambda: 0.5,
    )


def test_the_same_answer_counts_as_a_broken_request_once_shown_up_or_after_a_long_window() -> None:
    assert isinstance(_after(up=True, waited_s=5), End)
    assert isinstance(_after(up=False, waited_s=5), Retry), "an outage, as far as anyone knows"
    assert isinstance(_after(up=False, waited_s=SAME_ANSWER_WINDOW_S), End)
