"""Images end to end: attached to the task and read by `read_file`, kept as blobs in the log (the
events hold references only), and sent in each adapter's documented image form."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest

import hermetic
from bubu.engine.session import Host, new_session, start_turn
from bubu.events import FunctionResponse, ImageRef, Text
from bubu.log.sqlite import SQLiteStore
from bubu.providers.anthropic import AnthropicProvider
from bubu.providers.base import (
    AssistantMessage,
    ImagePart,
    ModelRequest,
    ToolCallPart,
    ToolResultPart,
    ToolResultsMessage,
    UserMessage,
)
from bubu.providers.openai import OpenAIProvider
from bubu.providers.openai_responses import OpenAIResponsesProvider
from bubu.providers.scripted import ScriptedProvider
from bubu.tools import builtin_tools

from .wire import ANTHROPIC_KEY, OPENAI_KEY, Wire, sse

TASK_PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 64
SHOT_PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(reversed(range(256))) * 64
SHOT = ImagePart(media_type="image/png", data=SHOT_PNG)
TASK = ImagePart(media_type="image/png", data=TASK_PNG)
HISTORY = ModelRequest(
    system="",
    tools=(),
    messages=(
        UserMessage(text="What is wrong here?", images=(TASK,)),
        AssistantMessage(
            parts=(ToolCallPart(call_id="c1", name="read_file", arguments={"path": "s.png"}),)
        ),
        ToolResultsMessage(
            results=(
                ToolResultPart(
                    call_id="c1", name="read_file", content="s.png: PNG image", images=(SHOT,)
                ),
            )
        ),
    ),
)


def bubu(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = hermetic.environ("BUBU_", "OPENAI_", "ANTHROPIC_")
    env["BUBU_HOME"] = str(db.parent)
    return subprocess.run(
        [sys.executable, "-m", "bubu", "--db", str(db), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.slow
def test_a_task_image_and_a_read_image_reach_the_model_as_blobs_of_the_log(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "shot.png").write_bytes(SHOT_PNG)
    wire = Wire([sse("responses_read_image.sse"), sse("responses_text.sse")])
    provider = OpenAIResponsesProvider("gpt-5", api_key=OPENAI_KEY, http_client=wire.client())
    with SQLiteStore(tmp_path / "bubu.db") as store:
        info = new_session(store, task="look", workspace=ws, model=provider.spec)
        reason = start_turn(
            Host(store=store, provider=provider, tools=builtin_tools()),
            info,
            "look",
            images=[("image/png", TASK_PNG)],
        )
        records = store.read(info.id)
        raw = [payload for _, _, payload in store.raw(info.id)]
        blobs = {sha: store.blob(sha) for sha in _image_shas(records)}
        assert store.verify(info.id).ok
    assert reason == "completed"

    (task,) = [
        c for r in records if r.event.role == "user" and isinstance(c := r.event.content, Text)
    ]
    (result,) = [c for r in records if isinstance(c := r.event.content, FunctionResponse)]
    assert [ref.media_type for ref in (*task.images, *result.images)] == ["image/png"] * 2
    assert blobs == {
        task.images[0].sha256: TASK_PNG,
        result.images[0].sha256: SHOT_PNG,
    }
    # The events hold references: neither the bytes nor their base64 are inlined in the log.
    for payload in raw:
        assert b64(TASK_PNG)[:64].encode() not in payload
        assert b64(SHOT_PNG)[:64].encode() not in payload

    first, second = wire.body(0), wire.body(1)
    assert first["input"] == [
        {
            "role": "user",
            "content": [
                {"type": "input_image", "image_url": f"data:image/png;base64,{b64(TASK_PNG)}"},
                {"type": "input_text", "text": "look"},
            ],
        }
    ]
    assert second["input"][-1] == {
        "type": "function_call_output",
        "call_id": "call_img01",
        "output": [
            {"type": "input_text", "text": f"shot.png: PNG image, {len(SHOT_PNG):,} bytes"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{b64(SHOT_PNG)}"},
        ],
    }


def _image_shas(records: list) -> list[str]:  # type: ignore[type-arg]
    refs: list[ImageRef] = []
    for r in records:
        refs.extend(getattr(r.event.content, "images", None) or [])
    return [ref.sha256 for ref in refs]


def test_anthropic_gets_base64_image_blocks_in_the_task_and_the_tool_result() -> None:
    wire = Wire([sse("anthropic_text.sse")])
    AnthropicProvider(
        "claude-sonnet-4-5", api_key=ANTHROPIC_KEY, http_client=wire.client()
    ).complete(HISTORY, lambda d: None)
    messages = wire.body()["messages"]
    source = {"type": "base64", "media_type": "image/png"}
    assert messages[0]["content"] == [
        {"type": "image", "source": {**source, "data": b64(TASK_PNG)}},
        {"type": "text", "text": "What is wrong here?", "cache_control": {"type": "ephemeral"}},
    ]
    (block,) = messages[2]["content"]
    assert block["content"] == [
        {"type": "text", "text": "s.png: PNG image"},
        {"type": "image", "source": {**source, "data": b64(SHOT_PNG)}},
    ]
    assert block["cache_control"] == {"type": "ephemeral"}


def test_chat_completions_sends_image_urls_and_tool_images_in_a_user_message() -> None:
    wire = Wire([sse("openai_text.sse")])
    OpenAIProvider("gpt-4.1", api_key=OPENAI_KEY, http_client=wire.client()).complete(
        HISTORY, lambda d: None
    )
    messages = wire.body()["messages"]
    assert messages[0]["content"] == [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(TASK_PNG)}"}},
        {"type": "text", "text": "What is wrong here?"},
    ]
    assert messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "s.png: PNG image"}
    assert messages[3] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "The images the tool results above show:"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{b64(SHOT_PNG)}"}},
        ],
    }


def test_which_models_are_shown_images(tmp_path: Path) -> None:
    script = tmp_path / "s.jsonl"
    script.write_text('{"text": "ok"}\n')
    local = "http://127.0.0.1:11434/v1"
    assert OpenAIResponsesProvider("gpt-5", api_key=OPENAI_KEY).accepts_images
    assert AnthropicProvider("claude-sonnet-4-5", api_key=ANTHROPIC_KEY).accepts_images
    assert OpenAIProvider("gpt-4.1", api_key=OPENAI_KEY).accepts_images
    assert not OpenAIProvider("llama3", api_key=OPENAI_KEY, base_url=local).accepts_images
    assert OpenAIProvider("llava", api_key=OPENAI_KEY, base_url=local, images=True).accepts_images
    assert not ScriptedProvider(str(script)).accepts_images
    assert ScriptedProvider(str(script), accepts_images=True).accepts_images


@pytest.mark.slow
def test_an_image_for_a_model_that_is_not_shown_images_is_refused_before_a_session(
    tmp_path: Path,
) -> None:
    script = tmp_path / "s.jsonl"
    script.write_text('{"text": "ok"}\n')
    (tmp_path / "a.png").write_bytes(TASK_PNG)
    db = tmp_path / "bubu.db"
    done = bubu(
        db,
        "run",
        "look",
        "-w",
        str(tmp_path),
        "-m",
        f"scripted:{script}",
        "--image",
        str(tmp_path / "a.png"),
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"bubu: error: scripted:{script} is not shown images, so --image cannot be used with "
        "it; choose a model that accepts images"
    ]
    with SQLiteStore(db) as store:
        assert store.sessions() == []
