"""The OpenAI adapter against hand-written Chat Completions wire fixtures, over the wire."""

from __future__ import annotations

import socket

import httpx2
import pytest

from bubu.errors import ConfigError, ProviderError
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
from bubu.providers.openai import OpenAIProvider

from .wire import (
    OPENAI_KEY,
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

READ_FILE = ToolSpec(
    name="read_file",
    description="Read a file in the workspace.",
    parameters={
        "type": "object",
        "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["path"],
    },
)
REQUEST = ModelRequest(
    system="You are Bubu.",
    tools=(READ_FILE,),
    messages=(UserMessage(text="Fix the failing test."),),
    max_tokens=1000,
)
LOCAL = "http://127.0.0.1:11434/v1"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)


def provider(wire: Wire, *, base_url: str | None = None) -> OpenAIProvider:
    return OpenAIProvider(
        "gpt-4.1", api_key=OPENAI_KEY, base_url=base_url, http_client=wire.client()
    )


def fail(responder: Responder, *, base_url: str | None = None) -> ProviderError:
    wire = Wire([responder])
    with pytest.raises(ProviderError) as caught:
        provider(wire, base_url=base_url).complete(REQUEST, Deltas())
    return caught.value


# ---- success paths -------------------------------------------------------------------------


def test_plain_text_streams_deltas_and_reports_usage() -> None:
    wire = Wire([sse("openai_text.sse")])
    deltas = Deltas()
    response = provider(wire).complete(REQUEST, deltas)

    assert deltas.of("text") == ["Hello", ", wörld.\n"]
    assert response.parts == (TextPart(text="Hello, wörld.\n"),)
    assert response.stop_reason == "end_turn"
    assert response.model == "gpt-4.1-2025-04-14"
    assert response.usage == Usage(input_tokens=1250, output_tokens=6, cache_read_tokens=1024)


def test_request_shape_on_the_wire() -> None:
    wire = Wire([sse("openai_text.sse")])
    provider(wire).complete(REQUEST, Deltas())

    request = wire.requests[0]
    assert request.url == "https://api.openai.com/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert request.headers.get("x-stainless-retry-count") == "0"
    assert wire.body() == {
        "model": "gpt-4.1",
        "messages": [
            {"role": "system", "content": "You are Bubu."},
            {"role": "user", "content": "Fix the failing test."},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "read_file",
                    "description": "Read a file in the workspace.",
                    "parameters": READ_FILE.parameters,
                },
            }
        ],
        "max_completion_tokens": 1000,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_no_tools_key_when_no_tools_are_offered() -> None:
    wire = Wire([sse("openai_text.sse")])
    bare = ModelRequest(system="", tools=(), messages=(UserMessage(text="hi"),))
    provider(wire).complete(bare, Deltas())
    assert "tools" not in wire.body()
    assert wire.body()["messages"] == [{"role": "user", "content": "hi"}]


def test_single_tool_call_is_assembled_from_fragments() -> None:
    wire = Wire([sse("openai_tool_call.sse")])
    response = provider(wire).complete(REQUEST, Deltas())

    assert response.parts == (
        ToolCallPart(
            call_id="call_DdmO9pD3xa9XTPNJ32zg2hcA",
            name="read_file",
            arguments={"path": "src/app.py", "limit": 200},
        ),
    )
    assert response.stop_reason == "tool_use"
    assert response.usage == Usage(input_tokens=310, output_tokens=22)


def test_parallel_tool_calls_keep_their_order_and_the_text_before_them() -> None:
    wire = Wire([sse("openai_parallel_tool_calls.sse")])
    deltas = Deltas()
    response = provider(wire).complete(REQUEST, deltas)

    assert deltas.of("text") == ["Let me look at both files."]
    assert response.parts == (
        TextPart(text="Let me look at both files."),
        ToolCallPart(call_id="call_first", name="read_file", arguments={"path": "a.py"}),
        ToolCallPart(
            call_id="call_second", name="grep", arguments={"pattern": "def main", "glob": "*.py"}
        ),
    )
    assert response.usage.cache_read_tokens == 384


def test_malformed_arguments_are_kept_raw() -> None:
    wire = Wire([sse("openai_malformed_arguments.sse")])
    response = provider(wire).complete(REQUEST, Deltas())

    assert response.parts == (
        ToolCallPart(
            call_id="call_broken",
            name="write_file",
            arguments={},
            raw_arguments='{"path": "notes.txt", "content": "unterminated',
        ),
    )
    assert response.stop_reason == "max_tokens"


def test_history_becomes_chat_messages() -> None:
    history = ModelRequest(
        system="sys",
        tools=(),
        messages=(
            UserMessage(text="task"),
            AssistantMessage(
                parts=(
                    ThinkingPart(text="private", signature="sig"),
                    TextPart(text="Looking."),
                    ToolCallPart(call_id="c1", name="read_file", arguments={"path": "ä.py"}),
                    ToolCallPart(call_id="c2", name="grep", arguments={}, raw_arguments="{oops"),
                )
            ),
            ToolResultsMessage(
                results=(
                    ToolResultPart(call_id="c1", name="read_file", content="print(1)"),
                    ToolResultPart(call_id="c2", name="grep", content="bad JSON", is_error=True),
                )
            ),
            AssistantMessage(parts=(ToolCallPart(call_id="c3", name="list_files", arguments={}),)),
            ToolResultsMessage(
                results=(ToolResultPart(call_id="c3", name="list_files", content="a.py"),)
            ),
            AssistantMessage(parts=(TextPart(text="Done."),)),
            UserMessage(text="thanks"),
        ),
    )
    wire = Wire([sse("openai_text.sse")])
    provider(wire).complete(history, Deltas())

    assert wire.body()["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "ä.py"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "grep", "arguments": "{oops"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "print(1)"},
        {"role": "tool", "tool_call_id": "c2", "content": "ERROR: bad JSON"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c3",
                    "type": "function",
                    "function": {"name": "list_files", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c3", "content": "a.py"},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "thanks"},
    ]


# ---- OpenAI-compatible servers ---------------------------------------------------------------


def test_compatible_server_without_a_key_gets_a_placeholder_and_max_tokens() -> None:
    wire = Wire([sse("openai_compatible_reasoning.sse")])
    deltas = Deltas()
    chosen = OpenAIProvider("qwen3:8b", base_url=LOCAL, http_client=wire.client())
    response = chosen.complete(REQUEST, deltas)

    request = wire.requests[0]
    assert request.url == f"{LOCAL}/chat/completions"
    assert request.headers["authorization"] == "Bearer not-needed"
    assert wire.body()["max_tokens"] == 1000
    assert "max_completion_tokens" not in wire.body()
    # Reasoning is shown as thinking; both calls arrive whole at index 0 with their own ids, and
    # "stop" with tool calls still means the model wants the tools run.
    assert deltas.of("thinking") == ["The user wants two files", " read."]
    assert response.parts == (
        ThinkingPart(text="The user wants two files read."),
        ToolCallPart(call_id="call_x1", name="read_file", arguments={"path": "a.py"}),
        ToolCallPart(call_id="call_x2", name="read_file", arguments={"path": "b.py"}),
    )
    assert response.stop_reason == "tool_use"
    assert response.usage == Usage(input_tokens=88, output_tokens=40)


def test_base_url_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", LOCAL)
    wire = Wire([sse("openai_text.sse")])
    OpenAIProvider("llama3.2", http_client=wire.client()).complete(REQUEST, Deltas())
    assert str(wire.requests[0].url).startswith(LOCAL)


def test_key_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env-123456789")
    wire = Wire([sse("openai_text.sse")])
    OpenAIProvider("gpt-4.1", http_client=wire.client()).complete(REQUEST, Deltas())
    assert wire.requests[0].headers["authorization"] == "Bearer sk-from-env-123456789"


def test_missing_key_for_openai_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"^OPENAI_API_KEY is not set; .*--base-url"):
        OpenAIProvider("gpt-4.1")


def test_spec_and_context_window() -> None:
    wire = Wire([])
    assert provider(wire).spec == "openai:gpt-4.1"
    # Hosted models: the genai-prices table.
    assert provider(wire).context_window == 1_000_000
    assert provider(wire).context_window_source == "genai-prices table"
    assert OpenAIProvider("gpt-4o-mini", api_key="k").context_window == 128_000
    assert OpenAIProvider("o3-mini", api_key="k").context_window == 200_000
    # A model nobody knows is unknown, said as such (not 128k).
    unknown = OpenAIProvider("gpt-unheard-of", api_key="k")
    assert (unknown.context_window, unknown.context_window_source) == (
        32_768,
        "default: unknown model",
    )
    # A server nobody answers at: it said nothing, so the default for an unknown model.
    assert OpenAIProvider("llama3.2", base_url="http://127.0.0.1:9/v1").context_window == 32_768
    given = OpenAIProvider("gpt-4.1", api_key="k", context_window=50_000)
    assert (given.context_window, given.context_window_source) == (50_000, "--context-window")


# ---- failures --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "name", "headers", "expected"),
    [
        (429, "openai_429.json", {"retry-after": "2"}, ("rate_limited", True, 2.0)),
        (
            429,
            "openai_429.json",
            {"retry-after-ms": "1400", "retry-after": "2"},
            ("rate_limited", True, 1.4),
        ),
        (
            429,
            "openai_429.json",
            {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"},
            ("rate_limited", True, 0.0),
        ),
        (429, "openai_429_quota.json", {}, ("quota", False, None)),
        (500, "openai_500.json", {}, ("server_error", True, None)),
        (503, "openai_500.json", {"retry-after": "30"}, ("server_error", True, 30.0)),
        (529, "openai_500.json", {}, ("overloaded", True, None)),
        (408, "openai_500.json", {}, ("timeout", True, None)),
        (409, "openai_500.json", {}, ("server_error", True, None)),
        (400, "openai_400_context.json", {}, ("context_length", False, None)),
        (404, "openai_404.json", {}, ("not_found", False, None)),
        (401, "openai_401.json", {}, ("auth", False, None)),
        (403, "openai_403.json", {}, ("auth", False, None)),
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
    assert error.body is not None
    assert_secret_free(error, OPENAI_KEY)


def test_rejected_key_says_which_variable_to_check() -> None:
    error = fail(status(401, "openai_401.json"))
    assert str(error) == (
        "the API key was rejected by OpenAI (401: Incorrect API key provided: ***. You can find "
        "your API key at https://platform.openai.com/account/api-keys.); check OPENAI_API_KEY"
    ), "the provider's own message, without the key"
    # The server echoed the key in its body; the error keeps the body without it.
    assert "invalid_api_key" in (error.body or "")
    assert_secret_free(error, OPENAI_KEY)


def test_errors_from_a_compatible_server_name_it() -> None:
    error = fail(status(500, "openai_500.json"), base_url="http://user:pw@127.0.0.1:8000/v1?x=1")
    assert "the server at http://127.0.0.1:8000/v1" in str(error)
    assert "pw" not in str(error)


def test_connection_reset_mid_stream_is_retryable() -> None:
    reset = httpx2.ReadError("[Errno 104] Connection reset by peer")
    wire = Wire([cut("openai_text.sse", after=2, error=reset)])
    deltas = Deltas()
    with pytest.raises(ProviderError) as caught:
        provider(wire).complete(REQUEST, deltas)

    error = caught.value
    assert deltas.of("text") == ["Hello"]
    assert (error.error_class, error.retryable) == ("stream_incomplete", True)
    assert "Connection reset by peer" in str(error)
    assert_secret_free(error, OPENAI_KEY)


def test_server_dropping_the_connection_mid_stream_over_a_real_socket() -> None:
    head = b"\n\n".join(fixture("openai_text.sse").split(b"\n\n")[:2]) + b"\n\n"
    with serve_cut_stream(head) as url:
        chosen = OpenAIProvider("gpt-4.1", api_key=OPENAI_KEY, base_url=f"{url}/v1")
        deltas = Deltas()
        with pytest.raises(ProviderError) as caught:
            chosen.complete(REQUEST, deltas)
    assert deltas.of("text") == ["Hello"]
    assert (caught.value.error_class, caught.value.retryable) == ("stream_incomplete", True)
    assert_secret_free(caught.value, OPENAI_KEY)


def test_connection_refused_is_retryable() -> None:
    with socket.socket() as sock:  # a port that was free a moment ago and has no listener
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    chosen = OpenAIProvider("gpt-4.1", api_key=OPENAI_KEY, base_url=f"http://127.0.0.1:{port}/v1")
    with pytest.raises(ProviderError) as caught:
        chosen.complete(REQUEST, Deltas())
    assert (caught.value.error_class, caught.value.retryable) == ("connection", True)
    assert f"127.0.0.1:{port}" in str(caught.value)
    assert_secret_free(caught.value, OPENAI_KEY)


def test_timeout_is_retryable() -> None:
    error = fail(raises(lambda request: httpx2.ReadTimeout("timed out", request=request)))
    assert (error.error_class, error.retryable) == ("timeout", True)
    assert str(error) == "the request to OpenAI timed out; check the network and try again"


def test_stream_ending_without_a_finish_reason_is_incomplete() -> None:
    error = fail(sse("openai_truncated.sse"))
    assert (error.error_class, error.retryable) == ("stream_incomplete", True)


def test_error_object_inside_the_stream_is_a_retryable_server_error() -> None:
    error = fail(sse("openai_error_event.sse"))
    assert (error.status, error.error_class, error.retryable) == (500, "server_error", True)
    assert "The server had an error" in str(error)


def test_garbage_in_the_stream_is_a_bad_response() -> None:
    garbage: Responder = lambda request: httpx2.Response(  # noqa: E731
        200, headers={"content-type": "text/event-stream"}, content=b"data: {not json\n\n"
    )
    error = fail(garbage)
    assert (error.error_class, error.retryable) == ("bad_response", True)


def test_whole_calls_without_ids_at_one_index_get_unique_ids() -> None:
    wire = Wire([sse("openai_compatible_no_ids.sse")])
    response = OpenAIProvider("local-model", base_url=LOCAL, http_client=wire.client()).complete(
        REQUEST, Deltas()
    )
    calls = [part for part in response.parts if isinstance(part, ToolCallPart)]
    assert [(c.name, c.arguments) for c in calls] == [
        ("list_files", {}),
        ("read_file", {"path": "README.md"}),
    ]
    assert all(c.call_id.startswith("call_") for c in calls)
    assert calls[0].call_id != calls[1].call_id
    # Usage on the finishing chunk (no separate usage chunk) is still read.
    assert response.usage == Usage(input_tokens=50, output_tokens=20)
