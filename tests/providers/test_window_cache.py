"""A hosted model's window is read from the price table once, then from Bubu's cache of it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

ASK = """
import json, sys
from bubu.providers import windows
found = windows.hosted_window("anthropic", "claude-haiku-4-5")
print(json.dumps([found.tokens, found.source, "genai_prices" in sys.modules]))
"""


def _ask(home: Path) -> list[object]:
    env = {**os.environ, "BUBU_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-c", ASK],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        umask=0o022,
    )
    answer: list[object] = json.loads(done.stdout)
    return answer


def test_the_table_is_asked_once_then_the_cache_answers(tmp_path: Path) -> None:
    first = _ask(tmp_path)
    assert first == [200_000, "genai-prices table", True]
    assert _ask(tmp_path) == [200_000, "genai-prices table", False]


def test_a_cache_of_another_table_is_not_believed(tmp_path: Path) -> None:
    _ask(tmp_path)
    path = tmp_path / "cache" / "windows.json"
    saved = json.loads(path.read_text())
    saved["windows"]["anthropic/claude-haiku-4-5"] = 1234
    path.write_text(json.dumps({**saved, "table": "another version"}))
    assert _ask(tmp_path) == [200_000, "genai-prices table", True]
    path.write_text("not json")
    assert _ask(tmp_path) == [200_000, "genai-prices table", True]


def test_a_cache_written_before_bubu_home_exists_makes_it_its_owners_alone(tmp_path: Path) -> None:
    home = tmp_path / "new" / "home"
    _ask(home)
    assert (home / "cache" / "windows.json").is_file()
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
