"""The layering rules of STYLE.md, checked rather than hoped for."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "bubu"

PURE = [
    "bubu.projections.turn",
    "bubu.projections.context",
    "bubu.projections.status",
    "bubu.projections.transcript",
    "bubu.projections.recovery",
    "bubu.projections.rewind",
    "bubu.projections.facts",
    "bubu.engine.decide",
]

FORBIDDEN = [
    "sqlite3",
    "subprocess",
    "httpx",
    "httpx2",
    "psycopg",
    "socket",
    "bubu.clock",
    "bubu.log.store",
    "bubu.log.sqlite",
    "bubu.log.postgres",
    "bubu.providers",
    "bubu.tools",
    "bubu.engine.driver",
    "bubu.failpoints",
]


def _loaded_after_import(module: str) -> set[str]:
    code = f"import sys, json; import {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_import_no_io(module: str) -> None:
    """Projections and the decide step pull in no store, provider, tool, process, socket or clock."""
    loaded = _loaded_after_import(module)
    bad = sorted(m for m in loaded for f in FORBIDDEN if m == f or m.startswith(f + "."))
    assert bad == [], f"{module} imports {bad}"


def test_every_event_kind_is_handled_by_the_transcript() -> None:
    """Each content kind and note kind of the vocabulary appears in the transcript projection."""
    from bubu import events

    text = (SRC / "projections" / "transcript.py").read_text()
    notes = [n.__name__ for n in events.Note.__args__]
    contents = [c.__name__ for c in events.Content.__args__]
    missing = [n for n in notes + contents if n not in text and n not in ("ModelRequest",)]
    assert missing == []
