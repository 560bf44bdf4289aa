"""A rewind puts back what an apply_patch created, updated and deleted, file by file."""

from __future__ import annotations

import json
from pathlib import Path

from bubu.api import Agent
from bubu.engine.rewind import preview, rewind
from bubu.log.sqlite import SQLiteStore

APP = 'def greet():\n    print("Hi")\n'
SCRIPT = [
    {
        "tool_calls": [
            {
                "name": "apply_patch",
                "arguments": {
                    "path": "helpers.py",
                    "operation": "create_file",
                    "diff": "+def shout(t):\n+    return t.upper()\n",
                },
            },
            {
                "name": "apply_patch",
                "arguments": {
                    "path": "app.py",
                    "operation": "update_file",
                    "diff": '@@ def greet():\n-    print("Hi")\n+    print("HI")\n',
                },
            },
            {"name": "apply_patch", "arguments": {"path": "old.py", "operation": "delete_file"}},
        ]
    },
    {"text": "patched"},
]


def test_a_rewind_undoes_each_file_of_a_patch(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "app.py").write_text(APP)
    (ws / "old.py").write_text("x = 1\n")
    script = tmp_path / "model.jsonl"
    script.write_text("".join(json.dumps(line) + "\n" for line in SCRIPT))
    db = tmp_path / "bubu.db"
    with Agent(model=f"scripted:{script}", store=db, workspace=ws) as agent:
        sid = agent.run("patch it").session
    assert (ws / "app.py").read_text() == 'def greet():\n    print("HI")\n'
    assert not (ws / "old.py").exists()
    assert (ws / "helpers.py").exists()
    with SQLiteStore(db) as store:
        plan = preview(store, sid, 0)
        actions = {Path(f.path).name: f.action for f in plan.files}
        assert actions == {"app.py": "restore", "old.py": "restore", "helpers.py": "delete"}
        rewind(store, plan)
    assert (ws / "app.py").read_text() == APP
    assert (ws / "old.py").read_text() == "x = 1\n"
    assert not (ws / "helpers.py").exists()
