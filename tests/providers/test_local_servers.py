"""Local model servers as they answer on the wire: the window each one serves, read from its own
endpoint, and what llama-server and llama-cpp-python send that is not the OpenAI format.

Every test runs a real HTTP server on a local socket (servers.py) answering with byte-exact
fixtures, and drives the real OpenAI-compatible adapter against it.
"""

from __future__ import annotations

import json

import pytest

from bubu.errors import ProviderError
from bubu.providers import windows
from bubu.providers.base import (
    AssistantMessage,
    ModelRequest,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    ToolResultsMessage,
    ToolSpec,
    UserMessage,
)
from bubu.providers.openai import OpenAIProvider

from .servers import EMPTY_STREAM, Answer, json_file, serve, stream_file
from .wire import Deltas

LLAMA_404 = json_file("llamacpp_404.json", 404)
OLLAMA_404 = Answer(404, b"404 page not found", "text/plain")
CHAT = ("POST", "/v1/chat/completions")
REQUEST = ModelRequest(system="sys", tools=(), messages=(UserMessage(text="hi"),), max_tokens=64)


def _window(url: str, model: str) -> tuple[int, str]:
    provider = OpenAIProvider(model, base_url=f"{url}/v1")
    return provider.context_window, provider.context_window_source


def test_llama_server_window_comes_from_props() -> None:
    with serve({("GET", "/props"): json_file("llamacpp_props.json")}, not_found=LLAMA_404) as s:
        assert _window(s.url, "SmolLM2") == (4096, "llama.cpp /props")
        assert s.paths() == ["GET /props"], "the first probe answered: no other is made"


def test_ollama_window_is_what_the_loaded_model_runs_with() -> None:
    routes = {
        ("GET", "/api/version"): json_file("ollama_version.json"),
        ("POST", "/api/show"): json_file("ollama_show.json"),
        ("GET", "/api/ps"): json_file("ollama_ps.json"),
    }
    with serve(routes, not_found=OLLAMA_404) as s:
        assert _window(s.url, "qwen2.5:0.5b") == (8192, "Ollama /api/ps")
        assert s.bodies("/api/show") == [{"model": "qwen2.5:0.5b"}]


def test_ollama_window_of_a_model_not_loaded_is_its_num_ctx_else_ollamas_default() -> None:
    routes = {
        ("GET", "/api/version"): json_file("ollama_version.json"),
        ("POST", "/api/show"): json_file("ollama_show_num_ctx.json"),
        ("GET", "/api/ps"): json_file("ollama_ps_empty.json"),
    }
    with serve(routes, not_found=OLLAMA_404) as s:
        assert _window(s.url, "qwen2.5:0.5b") == (16384, "Ollama /api/show num_ctx")
    routes[("POST", "/api/show")] = json_file("ollama_show.json")
    with serve(routes, not_found=OLLAMA_404) as s:
        # The model allows 32k, but Ollama serves its default unless told otherwise.
        assert _window(s.url, "qwen2.5:0.5b") == (
            4096,
            "Ollama's default num_ctx; the model allows 32,768",
        )


def test_vllm_window_is_max_model_len() -> None:
    routes = {("GET", "/v1/models"): json_file("vllm_models.json")}
    with serve(routes, not_found=json_file("vllm_404.json", 404)) as s:
        assert _window(s.url, "Qwen/Qwen2.5-0.5B-Instruct") == (
            32768,
            "vLLM /v1/models max_model_len",
        )
        assert s.paths()[-1] == "GET /v1/models"


def test_lm_studio_window_is_the_loaded_context_length() -> None:
    routes = {("GET", "/api/v0/models"): json_file("lmstudio_models.json")}
    with serve(routes) as s:
        assert _window(s.url, "qwen2.5-7b-instruct") == (
            8192,
            "LM Studio /api/v0/models loaded_context_length",
        )


def test_a_server_that_does_not_say_gets_the_unknown_default_said_as_such() -> None:
    routes = {
        ("GET", "/v1/models"): json_file("llamacpp_python_models.json"),
        ("GET", "/props"): Answer(200, b"<html>not json</html>", "text/html"),
    }
    with serve(routes) as s:
        assert _window(s.url, "SmolLM2-135M-Instruct") == (32_768, "default: unknown model")
        assert [m for m, _, _ in s.requests] == ["GET"] * len(s.requests), "only GETs"
        # Asked once per run: the provider keeps what it found.
        provider = OpenAIProvider("SmolLM2-135M-Instruct", base_url=f"{s.url}/v1")
        assert provider.context_window == 32_768
        asked = len(s.requests)
        assert provider.context_window_source == "default: unknown model"
        assert len(s.requests) == asked
    described = windows.Window(32_768, "default: unknown model").describe()
    assert described == "32,768 tokens (default: unknown model)"
    assert (
        windows.Window(4096, "llama.cpp /props").describe()
        == "4,096 tokens (from llama.cpp /props)"
    )


def test_the_users_window_wins_and_nothing_is_probed() -> None:
    with serve({("GET", "/props"): json_file("llamacpp_props.json")}) as s:
        provider = OpenAIProvider("m", base_url=f"{s.url}/v1", context_window=12_000)
        assert (provider.context_window, provider.context_window_source) == (
            12_000,
            "--context-window",
        )
        assert s.requests == []


def test_llama_server_overflow_is_a_context_overflow_that_states_the_window() -> None:
    routes = {CHAT: json_file("llamacpp_400_exceed_context.json", 400)}
    with serve(routes, not_found=LLAMA_404) as s:
        provider = OpenAIProvider("m", base_url=f"{s.url}/v1", context_window=8192)
        with pytest.raises(ProviderError) as caught:
            provider.complete(REQUEST, Deltas())
    e = caught.value
    assert (e.error_class, e.status, e.retryable) == ("context_length", 400, False)
    assert e.served_window == 4096
    assert "exceeds the available context size (4096 tokens)" in str(e)


def test_an_empty_200_stream_is_an_empty_stream_with_its_likely_cause() -> None:
    with serve({CHAT: EMPTY_STREAM}) as s:
        provider = OpenAIProvider("m", base_url=f"{s.url}/v1", context_window=8192)
        with pytest.raises(ProviderError) as caught:
            provider.complete(REQUEST, Deltas())
        sent = s.bodies("/v1/chat/completions")
    e = caught.value
    assert (e.error_class, e.retryable) == ("empty_stream", True)
    assert "closed the response stream without sending anything" in str(e)
    assert "exceeds its context window" in str(e)
    # Asked once more not streamed, to hear why; that said nothing either.
    assert [b["stream"] for b in sent] == [True, False]


def test_llama_cpp_python_overflow_is_heard_by_asking_again_not_streamed() -> None:
    # Its streamed answer to an overflow is a 200 with nothing in it; the same request not
    # streamed gets the 400 that states the window.
    answers = [EMPTY_STREAM, json_file("llamacpp_python_400_context.json", 400)]
    with serve({CHAT: answers}) as s:
        provider = OpenAIProvider("smol", base_url=f"{s.url}/v1", context_window=8192)
        with pytest.raises(ProviderError) as caught:
            provider.complete(WITH_TOOLS, Deltas())
        sent = s.bodies("/v1/chat/completions")
    e = caught.value
    assert (e.error_class, e.status, e.retryable) == ("context_length", 400, False)
    assert e.served_window == 4096
    assert "maximum context length is 4096 tokens" in str(e)
    assert [b["stream"] for b in sent] == [True, False]
    assert sent[0]["messages"] == sent[1]["messages"]


def test_an_empty_stream_that_was_not_an_overflow_gets_the_whole_answer() -> None:
    answers = [EMPTY_STREAM, json_file("llamacpp_python_whole_text.json")]
    with serve({CHAT: answers}) as s:
        provider = OpenAIProvider("smol", base_url=f"{s.url}/v1", context_window=8192)
        response = provider.complete(REQUEST, Deltas())
    assert response.parts == (TextPart(text="a.txt says hello."),)


def test_a_stream_without_usage_is_unknown_usage_and_keeps_the_servers_model_name() -> None:
    with serve({CHAT: stream_file("llamacpp_python_text_no_usage.sse")}) as s:
        provider = OpenAIProvider("smol", base_url=f"{s.url}/v1", context_window=8192)
        response = provider.complete(REQUEST, Deltas())
    assert response.parts == (TextPart(text="All done."),)
    assert response.usage.reported is False
    assert (response.usage.input_tokens, response.usage.output_tokens) == (0, 0)
    assert response.model == "SmolLM2-135M-Instruct"
    assert response.stop_reason == "end_turn"


def test_llama_server_usage_is_read_from_its_finishing_chunk() -> None:
    with serve({CHAT: stream_file("llamacpp_text.sse")}) as s:
        provider = OpenAIProvider("smol", base_url=f"{s.url}/v1", context_window=8192)
        response = provider.complete(REQUEST, Deltas())
    assert response.usage.reported is True
    assert (response.usage.input_tokens, response.usage.output_tokens) == (2011, 3)
    assert response.model == "SmolLM2-135M-Instruct-Q8_0.gguf"


def test_a_missing_finish_reason_is_inferred_from_what_arrived() -> None:
    answers = [
        stream_file("compatible_no_finish_reason.sse"),
        stream_file("compatible_no_finish_reason_call.sse"),
    ]
    with serve({CHAT: answers}) as s:
        provider = OpenAIProvider("m", base_url=f"{s.url}/v1", context_window=8192)
        text = provider.complete(REQUEST, Deltas())
        call = provider.complete(REQUEST, Deltas())
    assert (text.parts, text.stop_reason) == ((TextPart(text="Finished."),), "end_turn")
    assert call.stop_reason == "tool_use"
    assert call.parts == (ToolCallPart(call_id="call_x1", name="list_files", arguments={}),)


TOOLS = (ToolSpec(name="read_file", description="Read a file.", parameters={"type": "object"}),)
WITH_TOOLS = ModelRequest(
    system="sys", tools=TOOLS, messages=(UserMessage(text="hi"),), max_tokens=64
)


def test_a_server_sending_empty_streams_for_tool_calls_is_asked_whole_for_the_rest_of_the_run() -> (
    None
):
    # llama-cpp-python answers a streamed request whose answer starts with a tool call with an
    # empty 200; asked the same whole, it answers. From then on every step is asked whole once.
    answers = [
        EMPTY_STREAM,
        json_file("llamacpp_python_whole_tool_call.json"),
        json_file("llamacpp_python_whole_text.json"),
        json_file("llamacpp_python_whole_text.json"),
    ]
    with serve({CHAT: answers}) as s:
        provider = OpenAIProvider("smol", base_url=f"{s.url}/v1", context_window=8192)
        first = provider.complete(WITH_TOOLS, Deltas())
        second = provider.complete(WITH_TOOLS, Deltas())
        third = provider.complete(WITH_TOOLS, Deltas())
        sent = s.bodies("/v1/chat/completions")
    assert [b["stream"] for b in sent] == [True, False, False, False], "not twice per step"
    assert first.parts[0] == ToolCallPart(
        call_id="call__0_read_file_cmpl-7c1d", name="read_file", arguments={"path": "a.txt"}
    )
    assert first.notice is not None
    assert "cannot stream tool calls (it sent an empty stream where the answer was due" in (
        first.notice
    )
    assert (second.notice, third.notice) == (None, None), "said once"
    assert second.parts == (TextPart(text="a.txt says hello."),)


def test_llama_cpp_python_refusing_streamed_auto_gets_its_answers_whole() -> None:
    answers = [
        json_file("llamacpp_python_500_streaming_tool_choice.json", 500),
        json_file("llamacpp_python_whole_tool_call.json"),
        json_file("llamacpp_python_whole_text.json"),
    ]
    with serve({CHAT: answers}) as s:
        provider = OpenAIProvider("smol", base_url=f"{s.url}/v1", context_window=8192)
        deltas = Deltas()
        first = provider.complete(WITH_TOOLS, deltas)
        second = provider.complete(WITH_TOOLS, deltas)
        sent = s.bodies("/v1/chat/completions")
    # Asked for "auto" streamed (without it, llama-cpp-python drops the tools), then whole.
    assert [(b["stream"], b.get("tool_choice")) for b in sent] == [
        (True, "auto"),
        (False, "auto"),
        (False, "auto"),
    ]
    assert first.parts == (
        ToolCallPart(
            call_id="call__0_read_file_cmpl-7c1d", name="read_file", arguments={"path": "a.txt"}
        ),
    )
    assert first.stop_reason == "tool_use"
    assert first.usage.input_tokens == 412
    assert first.notice is not None
    assert first.notice.startswith("the server at ")
    assert (
        "cannot stream tool calls (Automatic streaming tool choice is not supported)"
        in first.notice
    )
    assert second.parts == (TextPart(text="a.txt says hello."),)
    assert second.notice is None, "said once"
    assert deltas.of("text") == ["a.txt says hello."]


def test_vllm_refusing_auto_gets_tools_without_tool_choice() -> None:
    answers = [json_file("vllm_400_auto_tool_choice.json", 400), stream_file("compatible_text.sse")]
    with serve({CHAT: answers}) as s:
        provider = OpenAIProvider("q", base_url=f"{s.url}/v1", context_window=8192)
        response = provider.complete(WITH_TOOLS, Deltas())
        sent = s.bodies("/v1/chat/completions")
    assert [("tool_choice" in b, len(b["tools"])) for b in sent] == [(True, 1), (False, 1)]
    assert response.notice is not None
    assert "refuses tool_choice" in response.notice
    assert "--enable-auto-tool-choice" in response.notice


def test_a_server_that_cannot_call_tools_is_asked_without_them_and_says_so() -> None:
    answers = [
        json_file("llamacpp_500_tools_need_jinja.json", 500),
        stream_file("llamacpp_text.sse"),
    ]
    with serve({CHAT: answers}, not_found=LLAMA_404) as s:
        provider = OpenAIProvider("smol", base_url=f"{s.url}/v1", context_window=8192)
        response = provider.complete(WITH_TOOLS, Deltas())
        sent = s.bodies("/v1/chat/completions")
    assert ["tools" in b for b in sent] == [True, False]
    assert response.parts == (TextPart(text="Done."),)
    assert response.notice is not None
    assert response.notice.endswith(
        "cannot call tools (tools param requires --jinja flag); the model answers in text only"
    )


def test_a_refusal_that_is_not_about_tools_is_the_ordinary_failure() -> None:
    with serve({CHAT: json_file("llamacpp_400_exceed_context.json", 400)}) as s:
        provider = OpenAIProvider("smol", base_url=f"{s.url}/v1", context_window=8192)
        with pytest.raises(ProviderError) as caught:
            provider.complete(WITH_TOOLS, Deltas())
        assert len(s.requests) == 1
    assert caught.value.error_class == "context_length"


def test_a_turn_of_tool_calls_alone_is_sent_to_a_compatible_server_with_empty_content() -> None:
    # llama-cpp-python's server answers 500 to an assistant message whose content is null (its
    # schema wants a string), so a compatible server is sent "" — the same bytes every time, so
    # a request issued again after a crash is the same request.
    history = ModelRequest(
        system="sys",
        tools=TOOLS,
        messages=(
            UserMessage(text="read a.txt"),
            AssistantMessage(
                parts=(ToolCallPart(call_id="c1", name="read_file", arguments={"path": "a.txt"}),)
            ),
            ToolResultsMessage(
                results=(ToolResultPart(call_id="c1", name="read_file", content="hello"),)
            ),
        ),
        max_tokens=64,
    )
    with serve({CHAT: stream_file("llamacpp_python_text_no_usage.sse")}) as s:
        provider = OpenAIProvider("smol", base_url=f"{s.url}/v1", context_window=8192)
        first = provider.complete(history, Deltas())
        provider.complete(history, Deltas())
        sent = [b for _, p, b in s.requests if p == "/v1/chat/completions"]
    assert first.parts == (TextPart(text="All done."),)
    assert json.loads(sent[0])["messages"][2] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
            }
        ],
    }
    assert sent[0] == sent[1]


def test_an_empty_stream_names_the_causes_it_cannot_tell_apart() -> None:
    # Not streamed, the server answers what cannot be read either: the causes stay open.
    with serve({CHAT: [EMPTY_STREAM, Answer(200, b"", "application/json")]}) as s:
        provider = OpenAIProvider("m", base_url=f"{s.url}/v1", context_window=8192)
        with pytest.raises(ProviderError) as caught:
            provider.complete(REQUEST, Deltas())
    said = str(caught.value)
    assert caught.value.error_class == "empty_stream"
    for cause in (
        "exceeds its context window",
        "cannot stream what was asked",
        "an automatic choice of tools",
        "failed in the middle of the request",
        "the server's log says which",
    ):
        assert cause in said, cause


def test_an_empty_stream_quotes_the_servers_error_when_asked_again() -> None:
    body = b'{"error": {"message": "llama_decode returned -3"}}'
    with serve({CHAT: [EMPTY_STREAM, Answer(500, body, "application/json")]}) as s:
        provider = OpenAIProvider("smol", base_url=f"{s.url}/v1", context_window=8192)
        with pytest.raises(ProviderError) as caught:
            provider.complete(REQUEST, Deltas())
    said = str(caught.value)
    assert caught.value.error_class == "empty_stream"
    assert "asked again without streaming it failed (" in said
    assert "llama_decode returned -3" in said
    assert "the server's log says which" in said  # it names no cause: they all stay open


def test_an_empty_stream_whose_server_says_it_cannot_stream_tools_is_asked_whole() -> None:
    # llama-cpp-python fails a streamed tool_choice "auto"; the error it gives asked again
    # names the cause, and the call goes on not streamed, as toolmode.py does for that error.
    body = b'{"error": {"message": "Automatic streaming tool choice is not supported"}}'
    answers = [
        EMPTY_STREAM,
        Answer(500, body, "application/json"),
        json_file("llamacpp_python_whole_text.json"),
    ]
    with serve({CHAT: answers}) as s:
        provider = OpenAIProvider("smol", base_url=f"{s.url}/v1", context_window=8192)
        response = provider.complete(WITH_TOOLS, Deltas())
    assert response.parts == (TextPart(text="a.txt says hello."),)
    assert response.notice is not None
    assert "cannot stream tool calls" in response.notice
