"""The session page pays for what it shows: the last page of the transcript without reading the
whole log, older pages by seq, and new records as item deltas on the stream."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from bubu.log import readview
from bubu.log.sqlite import SQLiteStore
from bubu.projections.memory import MEMORY_KINDS
from bubu.web import create_app
from bubu.web.stream import Deltas
from bubu.web.views import ToolItem

from .scenarios import TOKEN, run_scripted

STEPS = 60


@pytest.fixture
def long_session(
    tmp_path: Path, sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> tuple[SQLiteStore, str]:
    monkeypatch.setattr(readview, "EVERY", 40)
    (tmp_path / "ws").mkdir()
    lines: list[dict[str, Any]] = []
    for i in range(STEPS):
        (tmp_path / "ws" / f"f{i}.txt").write_text(f"file {i}\n")
        call = {"name": "read_file", "arguments": {"path": f"f{i}.txt"}}
        lines.append({"text": f"step {i}", "tool_calls": [call]})
    sid = run_scripted(sqlite_store, tmp_path, "ws", "read a lot", [*lines, {"text": "Done."}])
    return sqlite_store, sid


@pytest.fixture
def client(long_session: tuple[SQLiteStore, str], tmp_path: Path) -> Iterator[TestClient]:
    store, _ = long_session
    app = create_app(store, token=TOKEN, recover=False, workspace=str(tmp_path))
    with TestClient(
        app, base_url="http://127.0.0.1:8642", headers={"authorization": f"Bearer {TOKEN}"}
    ) as c:
        yield c


def _counting(store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make `store.read` count the records it returns for the session's page."""
    counts: list[int] = []
    read = store.read

    def counted(*args: Any, **kw: Any) -> Any:
        out = read(*args, **kw)
        # The workspace's memory notes are folded from every session of the workspace by kind
        # (remember calls and their outcomes), apart from the session's own reading.
        if kw.get("kinds") != MEMORY_KINDS:
            counts.append(len(out))
        return out

    monkeypatch.setattr(store, "read", counted)
    return counts


def test_the_last_page_is_read_from_the_snapshot_and_the_tail_not_the_whole_log(
    long_session: tuple[SQLiteStore, str], client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, sid = long_session
    whole = client.get(f"/api/sessions/{sid}").json()
    events = store.head(sid).high_water
    assert events > 4 * readview.EVERY
    counts = _counting(store, monkeypatch)
    page = client.get(f"/api/sessions/{sid}?tail=10")
    assert page.status_code == 200, page.text
    paged = page.json()
    # What it read: the records after the snapshot and those of the page, far from the log.
    assert sum(counts) < readview.EVERY + 60
    assert sum(counts) < events // 3
    assert paged["items"] == whole["items"][-10:]
    assert paged["first_seq"] == paged["items"][0]["seq"] - 1
    for key in ("high_water", "notice", "permissions", "plan", "cause"):
        assert paged[key] == whole[key]
    assert paged["session"] == whole["session"]
    assert {u["seq"] for u in paged["usage"]} == {
        u["seq"] for u in whole["usage"] if u["seq"] >= paged["items"][0]["seq"]
    }


def test_older_pages_join_up_to_the_whole_transcript(
    long_session: tuple[SQLiteStore, str], client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, sid = long_session
    whole = client.get(f"/api/sessions/{sid}").json()["items"]
    items = client.get(f"/api/sessions/{sid}?tail=25").json()["items"]
    counts = _counting(store, monkeypatch)
    pages = 0
    while items[0]["seq"] > whole[0]["seq"]:
        r = client.get(f"/api/sessions/{sid}/items?before={items[0]['seq']}&limit=25")
        assert r.status_code == 200, r.text
        older = r.json()["items"]
        assert older
        assert len(older) <= 25
        items = older + items
        pages += 1
    assert items == whole
    assert pages >= 3
    # Each page read its own records (plus the snapshot's suffix), never the whole log.
    assert max(counts) < store.head(sid).high_water // 2


def test_a_bad_page_request_is_refused_in_one_line(
    long_session: tuple[SQLiteStore, str], client: TestClient
) -> None:
    _, sid = long_session
    r = client.get(f"/api/sessions/{sid}/items?before=abc")
    assert r.status_code == 400
    assert "before must be a non-negative whole number" in r.text


def test_deltas_carry_new_items_and_the_cards_a_later_batch_finishes(
    long_session: tuple[SQLiteStore, str],
) -> None:
    store, sid = long_session
    records = store.read(sid)
    calls = [i for i, r in enumerate(records) if type(r.event.content).__name__ == "FunctionCall"]
    cut = calls[-1] + 1  # the last call is in the first batch, its outcome in the second
    deltas = Deltas(records[: cut - 5])
    first = deltas.apply(records[cut - 5 : cut])
    assert [i.status for i in first.items if isinstance(i, ToolItem)][-1] == "proposed"
    second = deltas.apply(records[cut:])
    card = next(i for i in second.items if isinstance(i, ToolItem))
    assert card.seq == records[calls[-1]].seq
    assert card.status == "completed"
    assert second.high_water == records[-1].seq
    assert len(deltas.t.cards) == 0
