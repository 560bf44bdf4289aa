"""A command's large output is offloaded as what it printed: the blob holds the output alone (so
JSON reads as JSON), and the placeholder the model sees ends with how the command ended."""

from __future__ import annotations

import json
from pathlib import Path

from bubu.engine.session import new_session, start_turn
from bubu.events import FunctionResponse
from bubu.log.sqlite import SQLiteStore
from bubu.tools.inspect_result import detect

from .helpers import call, make_host, scripted, write_script


def test_a_commands_json_is_offloaded_without_its_exit_status(
    tmp_path: Path, sqlite_store: SQLiteStore, ws: Path
) -> None:
    rows = [{"id": i, "name": f"item-{i}", "tags": ["a", "b"]} for i in range(400)]
    (ws / "data.json").write_text(json.dumps(rows))
    lines: list[dict[str, object]] = [
        {"text": "look", "tool_calls": [call("run_command", command="cat data.json")]},
        {"text": "done"},
    ]
    provider = scripted(write_script(tmp_path / "s.jsonl", lines))
    info = new_session(sqlite_store, task="t", workspace=ws, model=provider.spec)
    assert start_turn(make_host(sqlite_store, provider), info, "t") == "completed"
    (result,) = [
        c for r in sqlite_store.read(info.id) if isinstance(c := r.event.content, FunctionResponse)
    ]
    assert result.blob is not None, "large enough to be offloaded"
    assert result.result.endswith("\nexit code 0"), "the placeholder says how it ended"
    data = sqlite_store.blob(result.blob.sha256)
    assert data is not None
    assert json.loads(data) == rows, "the blob is exactly what the command printed"
    assert detect(data) == "json"
