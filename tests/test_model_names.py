"""The docs, the README, the web form and the CLI's messages name one example Anthropic model:
the one Bubu picks by itself when only ANTHROPIC_API_KEY is set."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bubu.cli.agentcmds import default_model

ROOT = Path(__file__).resolve().parents[1]
SONNET = re.compile(r"claude-sonnet-\d+-\d+(?![\d-])")
"""An Anthropic Sonnet model id without a date suffix (a dated id such as
claude-sonnet-4-5-20250929 shows the id format, not a model to pick; OpenRouter's ids are
dotted)."""


def test_every_example_sonnet_is_the_default_one(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("BUBU_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    chosen = default_model().removeprefix("anthropic:")
    files = [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "src" / "bubu").rglob("*.py")),
        *sorted((ROOT / "src" / "bubu" / "web" / "static").glob("*.*")),
    ]
    named = {
        (str(f.relative_to(ROOT)), m.group(0))
        for f in files
        for m in SONNET.finditer(f.read_text(errors="replace"))
    }
    assert named, "the examples were found"
    assert {n for n in named if n[1] != chosen} == set()
