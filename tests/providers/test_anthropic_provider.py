"""The Anthropic adapter against hand-written Messages API stream fixtures, over the wire."""

from __future__ import annotations

import json

import httpx2
import pytest

from bubu.errors import ConfigError, ProviderError
from bubu.providers.anthropic import AnthropicProvider, thinking_config
from bubu.providers.base import (
    AssistantMessage,
    ModelRequest,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    ToolResultsMessage,
    ToolSpec,
    Usage,
    UserMessage,
)

from .wire import (
    ANTHROPIC_KEY,
    Deltas,
    Responder,
    Wire,
    assert_secret_free,
    cut,
    fixture,
    raises,
    serve_cut_stream,
    sse,
    status,
)

MODEL = "claude-haiku-4-5"
READ_FILE = ToolSpec(
    name="read_file",
    description="Read a file in the workspace.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
GREP = ToolSpec(
    name="grep",
    description="Search files.",
    parameters={"type": "object", "properties": {"pattern": {"type": "string"}}},
)
REQUEST = ModelRequest(
    system="You are Bubu.",
    tools=(READ_FILE, GREP),
    messages=(UserMessage(text="Fix the failing test."),),
    max_tokens=1000,
)
EPHEMERAL = {"type": "ephemeral"}
THINKING_TEXT = (
    'The test fails in parse_args.\n\nLet me check the caller — "main()" passes argv[1:]  twice? '
)
SIGNATURE = (
    "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds/+Xy9Kcl3Rz7j4RF0k1x0bU5EpHNnB2Qq4tJ8w1s"
    "GM0x+q7ZlvXGm0Wc1V7hQ=="
)
REDACTED = (
    "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB8URj"
    "2pLmN3kYfgHgG4d8vX1XA=="
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def provider(
    wire: Wire, *, model: str = MODEL, thinking_budget: int | None = None
) -> AnthropicProvider:
    return AnthropicProvider(
        model, api_key=ANTHROPIC_KEY, http_client=wire.client(), thinking_budget=thinking_budget
    )


def fail(responder: Responder) -> ProviderError:
    wire = Wire([responder])
    with pytest.raises(ProviderError) as caught:
        provider(wire).complete(REQUEST, Deltas())
    return caught.value


# ---- success paths -------------------------------------------------------------------------


def test_plain_text_streams_deltas_and_reports_usage() -> None:
    wire = Wire([sse("anthropic_text.sse")])
    deltas = Deltas()
    response = provider(wire).complete(REQUEST, deltas)

    assert deltas.of("text") == ["Hello", ", wörld.\n"]
    assert response.parts == (TextPart(text="Hello, wörld.\n"),)
    assert response.stop_reason == "end_turn"
    assert response.model == "claude-haiku-4-5-20251001"
    assert response.usage == Usage(input_tokens=25, output_tokens=15)


def test_request_shape_with_cache_breakpoints_on_system_and_latest_turn() -> None:
    wire = Wire([sse("anthropic_text.sse")])
    provider(wire).complete(REQUEST, Deltas())

    request = wire.requests[0]
    assert request.url == "https://api.anthropic.com/v1/messages"
    assert request.headers["authorization"] == f"Bearer {ANTHROPIC_KEY}"
    assert "anthropic-version" in request.headers
    assert request.headers.get("x-stainless-retry-count") == "0"
    assert wire.body() == {
        "model": MODEL,
        "max_tokens": 1000,
        "stream": True,
        # Rendered order is tools, then system: the breakpoint on system caches both.
        "system": [{"type": "text", "text": "You are Bubu.", "cache_control": EPHEMERAL}],
        "tools": [
            {
                "name": "read_file",
                "description": "Read a file in the workspace.",
                "input_schema": READ_FILE.parameters,
            },
            {"name": "grep", "description": "Search files.", "input_schema": GREP.parameters},
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Fix the failing test.", "cache_control": EPHEMERAL}
                ],
            }
        ],
    }


def test_without_a_system_prompt_the_last_tool_closes_the_cached_prefix() -> None:
    wire = Wire([sse("anthropic_text.sse")])
    bare = ModelRequest(system="", tools=(READ_FILE, GREP), messages=REQUEST.messages)
    provider(wire).complete(bare, Deltas())

    body = wire.body()
    assert "system" not in body
    assert "cache_control" not in body["tools"][0]
    assert body["tools"][1]["cache_control"] == EPHEMERAL


def test_tool_use_is_assembled_from_json_fragments() -> None:
    wire = Wire([sse("anthropic_tool_use.sse")])
    deltas = Deltas()
    response = provider(wire).complete(REQUEST, deltas)

    assert deltas.of("text") == ["I'll read the file", " first."]
    assert response.parts == (
        TextPart(text="I'll read the file first."),
        ToolCallPart(
            call_id="toolu_01T1x1fJ34qAmk2tNTrN7Up6",
            name="read_file",
            arguments={"path": "src/app.py", "limit": 200},
        ),
    )
    assert response.stop_reason == "tool_use"
    assert response.usage == Usage(
        input_tokens=472 + 2048, output_tokens=89, cache_write_tokens=2048
    )


def test_tool_input_cut_off_by_max_tokens_is_kept_raw() -> None:
    wire = Wire([sse("anthropic_max_tokens_tool.sse")])
    response = provider(wire).complete(REQUEST, Deltas())

    assert response.parts == (
        ToolCallPart(
            call_id="toolu_01Cut",
            name="write_file",
            arguments={},
            raw_arguments='{"path": "notes.txt", "content": "unterminat',
        ),
    )
    assert response.stop_reason == "max_tokens"


def test_thinking_with_signature_is_kept_and_replayed_byte_for_byte() -> None:
    wire = Wire([sse("anthropic_thinking.sse"), sse("anthropic_text.sse")])
    chosen = provider(wire, thinking_budget=2048)
    deltas = Deltas()
    first = chosen.complete(REQUEST, deltas)

    assert deltas.of("thinking") == [
        "The test fails in parse_args.\n\nLet me check",
        ' the caller — "main()" passes argv[1:]  twice? ',
    ]
    assert first.parts == (
        ThinkingPart(text=THINKING_TEXT, signature=SIGNATURE),
        TextPart(text="Reading main.py."),
        ToolCallPart(call_id="toolu_01ThinkRead", name="read_file", arguments={"path": "main.py"}),
    )
    # message_delta's cumulative counts win over message_start's.
    assert first.usage == Usage(
        input_tokens=36 + 4096 + 512,
        output_tokens=211,
        cache_read_tokens=4096,
        cache_write_tokens=512,
    )
    assert wire.body(0)["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert wire.body(0)["max_tokens"] == 1000 + 2048

    follow_up = ModelRequest(
        system=REQUEST.system,
        tools=REQUEST.tools,
        messages=(
            *REQUEST.messages,
            AssistantMessage(parts=first.parts),
            ToolResultsMessage(
                results=(
                    ToolResultPart(call_id="toolu_01ThinkRead", name="read_file", content="x = 1"),
                )
            ),
        ),
        max_tokens=1000,
    )
    chosen.complete(follow_up, Deltas())

    assistant = wire.body(1)["messages"][1]
    assert assistant == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": THINKING_TEXT, "signature": SIGNATURE},
            {"type": "text", "text": "Reading main.py."},
            {
                "type": "tool_use",
                "id": "toolu_01ThinkRead",
                "name": "read_file",
                "input": {"path": "main.py"},
            },
        ],
    }
    # The signature and thinking text go out exactly as they came in.
    raw = wire.requests[1].content
    assert json.dumps(SIGNATURE).encode() in raw
    assert json.loads(raw)["messages"][1]["content"][0]["thinking"] == THINKING_TEXT


def test_redacted_thinking_is_kept_and_replayed_first() -> None:
    wire = Wire([sse("anthropic_redacted_thinking.sse"), sse("anthropic_text.sse")])
    chosen = provider(wire, thinking_budget=1024)
    first = chosen.complete(REQUEST, Deltas())

    assert first.parts == (
        ThinkingPart(text="", redacted=REDACTED),
        ThinkingPart(text="Now the summary.", signature="ErUBCkYIBxgCIkBm2Qp9sig+second=="),
        TextPart(text="Done."),
    )
    follow_up = ModelRequest(
        system="",
        tools=(),
        messages=(
            *REQUEST.messages,
            AssistantMessage(parts=first.parts),
            UserMessage(text="And now?"),
        ),
    )
    chosen.complete(follow_up, Deltas())
    assert wire.body(1)["messages"][1]["content"] == [
        {"type": "redacted_thinking", "data": REDACTED},
        {
            "type": "thinking",
            "thinking": "Now the summary.",
            "signature": "ErUBCkYIBxgCIkBm2Qp9sig+second==",
        },
        {"type": "text", "text": "Done."},
    ]


def test_unsigned_thinking_from_elsewhere_is_not_sent() -> None:
    wire = Wire([sse("anthropic_text.sse")])
    request = ModelRequest(
        system="",
        tools=(),
        messages=(
            UserMessage(text="a"),
            AssistantMessage(parts=(ThinkingPart(text="from a local model"), TextPart(text="b"))),
            UserMessage(text="c"),
        ),
    )
    provider(wire).complete(request, Deltas())
    assert wire.body()["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "b"}],
    }


def test_tool_results_are_grouped_and_the_two_newest_user_turns_carry_breakpoints() -> None:
    calls = (
        ToolCallPart(call_id="t1", name="read_file", arguments={"path": "a.py"}),
        ToolCallPart(call_id="t2", name="grep", arguments={"pattern": "x"}),
    )
    request = ModelRequest(
        system="sys",
        tools=(),
        messages=(
            UserMessage(text="task"),
            AssistantMessage(parts=(ToolCallPart(call_id="t0", name="grep", arguments={}),)),
            ToolResultsMessage(results=(ToolResultPart(call_id="t0", name="grep", content=""),)),
            AssistantMessage(parts=calls),
            ToolResultsMessage(
                results=(
                    ToolResultPart(call_id="t1", name="read_file", content="x = 1"),
                    ToolResultPart(call_id="t2", name="grep", content="no match", is_error=True),
                )
            ),
            UserMessage(text="note from the host"),
        ),
    )
    wire = Wire([sse("anthropic_text.sse")])
    provider(wire).complete(request, Deltas())

    assert wire.body()["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "task"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t0", "name": "grep", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t0",
                    "content": "",
                    "cache_control": EPHEMERAL,
                }
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a.py"}},
                {"type": "tool_use", "id": "t2", "name": "grep", "input": {"pattern": "x"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "x = 1"},
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "content": "no match",
                    "is_error": True,
                },
                {"type": "text", "text": "note from the host", "cache_control": EPHEMERAL},
            ],
        },
    ]


def test_thinking_mode_follows_the_model_generation() -> None:
    assert thinking_config("claude-haiku-4-5-20251001", 4096) == {
        "type": "enabled",
        "budget_tokens": 4096,
    }
    assert thinking_config("claude-3-7-sonnet-20250219", 2048)["type"] == "enabled"
    assert thinking_config("claude-sonnet-4-6", 2048) == {"type": "adaptive"}
    assert thinking_config("claude-opus-5", 2048) == {"type": "adaptive"}
    assert thinking_config("claude-mythos-preview", 2048) == {"type": "adaptive"}
    assert thinking_config("my-proxy-model", 2048)["type"] == "enabled"


def test_adaptive_models_get_adaptive_thinking_on_the_wire() -> None:
    wire = Wire([sse("anthropic_thinking.sse")])
    provider(wire, model="claude-sonnet-4-6", thinking_budget=4096).complete(REQUEST, Deltas())
    assert wire.body()["thinking"] == {"type": "adaptive"}
    assert wire.body()["max_tokens"] == 1000 + 4096


def test_configuration_errors() -> None:
    with pytest.raises(ConfigError, match=r"^ANTHROPIC_API_KEY is not set; "):
        AnthropicProvider(MODEL)
    with pytest.raises(ConfigError, match="at least 1024"):
        AnthropicProvider(MODEL, api_key="k", thinking_budget=100)


def test_key_and_base_url_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env-123456")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:4000")
    wire = Wire([sse("anthropic_text.sse")])
    AnthropicProvider(MODEL, http_client=wire.client()).complete(REQUEST, Deltas())
    assert wire.requests[0].headers["authorization"] == "Bearer sk-ant-from-env-123456"
    assert str(wire.requests[0].url) == "http://127.0.0.1:4000/v1/messages"


def test_spec_and_context_window() -> None:
    wire = Wire([])
    assert provider(wire).spec == "anthropic:claude-haiku-4-5"
    assert provider(wire).context_window == 200_000
    assert (
        AnthropicProvider(MODEL, api_key="k", context_window=1_000_000).context_window == 1_000_000
    )


# ---- failures --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "name", "headers", "expected"),
    [
        (429, "anthropic_429.json", {"retry-after": "7"}, ("rate_limited", True, 7.0)),
        (500, "anthropic_500.json", {}, ("server_error", True, None)),
        (503, "anthropic_500.json", {}, ("server_error", True, None)),
        (529, "anthropic_529.json", {}, ("overloaded", True, None)),
        (400, "anthropic_400_too_long.json", {}, ("context_length", False, None)),
        (401, "anthropic_401.json", {}, ("auth", False, None)),
    ],
)
def test_http_errors_are_classified(
    code: int,
    name: str,
    headers: dict[str, str],
    expected: tuple[str, bool, float | None],
) -> None:
    error = fail(status(code, name, headers=headers))
    assert error.status == code
    assert (error.error_class, error.retryable, error.retry_after) == expected
    assert_secret_free(error, ANTHROPIC_KEY)


def test_rejected_key_says_which_variable_to_check() -> None:
    error = fail(status(401, "anthropic_401.json"))
    assert str(error) == (
        "the API key was rejected by Anthropic (401: invalid x-api-key: ***); "
        "check ANTHROPIC_API_KEY"
    )
    assert "authentication_error" in (error.body or "")
    assert_secret_free(error, ANTHROPIC_KEY)


def test_overloaded_error_event_inside_the_stream() -> None:
    wire = Wire([sse("anthropic_error_event.sse")])
    deltas = Deltas()
    with pytest.raises(ProviderError) as caught:
        provider(wire).complete(REQUEST, deltas)
    error = caught.value
    assert deltas.of("text") == ["Part"]
    assert (error.status, error.error_class, error.retryable) == (529, "overloaded", True)
    assert_secret_free(error, ANTHROPIC_KEY)


def test_connection_reset_mid_stream_is_retryable() -> None:
    reset = httpx2.ReadError("[Errno 104] Connection reset by peer")
    wire = Wire([cut("anthropic_text.sse", after=4, error=reset)])
    deltas = Deltas()
    with pytest.raises(ProviderError) as caught:
        provider(wire).complete(REQUEST, deltas)
    assert deltas.of("text") == ["Hello"]
    assert (caught.value.error_class, caught.value.retryable) == ("stream_incomplete", True)
    assert_secret_free(caught.value, ANTHROPIC_KEY)


def test_server_dropping_the_connection_mid_stream_over_a_real_socket() -> None:
    head = b"\n\n".join(fixture("anthropic_text.sse").split(b"\n\n")[:4]) + b"\n\n"
    with serve_cut_stream(head) as url:
        chosen = AnthropicProvider(MODEL, api_key=ANTHROPIC_KEY, base_url=url)
        deltas = Deltas()
        with pytest.raises(ProviderError) as caught:
            chosen.complete(REQUEST, deltas)
    assert deltas.of("text") == ["Hello"]
    assert (caught.value.error_class, caught.value.retryable) == ("stream_incomplete", True)
    assert_secret_free(caught.value, ANTHROPIC_KEY)


def test_stream_ending_before_the_message_stops_is_incomplete() -> None:
    error = fail(sse("anthropic_truncated.sse"))
    assert (error.error_class, error.retryable) == ("stream_incomplete", True)


def test_timeout_and_connect_errors_are_retryable() -> None:
    timeout = fail(raises(lambda request: httpx2.ConnectTimeout("timed out", request=request)))
    assert (timeout.error_class, timeout.retryable) == ("timeout", True)
    refused = fail(raises(lambda request: httpx2.ConnectError("refused", request=request)))
    assert (refused.error_class, refused.retryable) == ("connection", True)
    assert str(refused) == (
        "could not connect to Anthropic (ConnectError: refused); check the network and the base URL"
    )


def test_unknown_event_and_block_kinds_are_ignored() -> None:
    events = fixture("anthropic_text.sse").replace(
        b"event: message_delta",
        b'event: future_event\ndata: {"type":"future_event","x":1}\n\n'
        b"event: content_block_start\n"
        b'data: {"type":"content_block_start","index":1,'
        b'"content_block":{"type":"future_block","stuff":true}}\n\n'
        b"event: message_delta",
    )
    wire = Wire([lambda request: httpx2.Response(200, content=events)])
    response = provider(wire).complete(REQUEST, Deltas())
    assert response.parts == (TextPart(text="Hello, wörld.\n"),)
