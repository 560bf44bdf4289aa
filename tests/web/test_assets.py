"""The page and its assets are read once when the UI starts: reinstalling or upgrading Bubu while
`bubu ui` runs (pip replacing the package's files, as `pip install -e .` over a plain install
does) leaves the running UI whole instead of answering `index.html does not exist`."""

from __future__ import annotations

import shutil
from pathlib import Path

from starlette.testclient import TestClient

from bubu.log.sqlite import SQLiteStore
from bubu.web import create_app
from bubu.web.app import STATIC

from .scenarios import TOKEN


def test_the_ui_keeps_serving_its_page_after_its_files_are_gone(tmp_path: Path) -> None:
    static = tmp_path / "static"
    shutil.copytree(STATIC, static)
    with SQLiteStore(tmp_path / "bubu.db") as store:
        app = create_app(store, token=TOKEN, recover=False, workspace=str(tmp_path), static=static)
        shutil.rmtree(static)  # the package replaced under the running UI
        with TestClient(app, base_url="http://127.0.0.1:8642") as client:
            page = client.get("/")
            script = client.get("/static/app.js")
            style = client.get("/static/app.css")
            missing = client.get("/static/nothing.js")
    assert page.status_code == 200
    assert page.text == (STATIC / "index.html").read_text()
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert (script.status_code, script.headers["content-type"].split(";")[0]) == (
        200,
        "text/javascript",
    )
    assert script.content == (STATIC / "app.js").read_bytes()
    assert (style.status_code, style.headers["content-type"].split(";")[0]) == (200, "text/css")
    assert missing.status_code == 404
