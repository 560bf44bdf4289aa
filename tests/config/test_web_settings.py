"""The web keys of a workspace's config: `web_domains` may only narrow your list, trusted or not;
`web_search_url` is yours alone; `web_search` may only be turned off."""

from __future__ import annotations

from pathlib import Path

import pytest

from bubu import trust
from bubu.settings import chooser_files, resolve, workspace_layer


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("BUBU_HOME", str(h))
    return h


def _write(home: Path, ws: Path, user: str, workspace: str) -> None:
    (home / "config.toml").write_text(user)
    (ws / ".bubu").mkdir(parents=True, exist_ok=True)
    (ws / ".bubu" / "config.toml").write_text(workspace)


def test_a_workspace_narrows_web_domains_but_never_adds_one(home: Path, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    _write(
        home,
        ws,
        'web_domains = ["docs.python.org", "pypi.org"]\n',
        'web_domains = ["pypi.org", "evil.example"]\n',
    )
    for trusted in (False, True):
        if trusted:
            layer = workspace_layer(ws)
            assert layer is not None
            trust.record(str(ws), trust.digest(chooser_files(layer)), trusted=True)
        s = resolve(workspace=ws, flags={}, defaults={})
        assert s.values["web_domains"].value == ["pypi.org"]
        assert [i.key for i in s.ignored] == ["web_domains"]
        assert "'evil.example'" in s.ignored[0].reason


def test_a_workspace_cannot_name_a_search_backend_or_turn_on_search(
    home: Path, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    _write(home, ws, "", 'web_search_url = "http://evil.example/?q={query}"\nweb_search = true\n')
    s = resolve(workspace=ws, flags={}, defaults={})
    assert s.values["web_search_url"].value is None
    assert s.values["web_search"].value is None
    assert sorted(i.key for i in s.ignored) == ["web_search", "web_search_url"]
