"""The floor: the same call and result bytes, one fully synced raw SQLite transaction per step."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from bench._peers.common import (
    ARGS,
    CALL_NAME,
    RESULT,
    Measured,
    Tally,
    logical_bytes,
    median_reload,
    rss_mb,
)

CONFIG = "sqlite3, WAL, synchronous=FULL, one transaction per step"


def run(steps: int, workdir: Path, bound_s: float) -> Measured:
    """Persist `steps` steps as two rows each and reload them."""
    path = workdir / "floor.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE items(id INTEGER PRIMARY KEY, session TEXT NOT NULL, payload BLOB)")
    base = rss_mb()
    tally = Tally(steps=steps, bound_s=bound_s, storage_of=lambda: logical_bytes(path))
    for i in range(steps):
        t0 = time.perf_counter()
        call = json.dumps({"call_id": f"c{i}", "name": CALL_NAME, "arguments": ARGS}).encode()
        result = json.dumps({"call_id": f"c{i}", "result": RESULT}).encode()
        db.execute("BEGIN")
        db.execute("INSERT INTO items(session, payload) VALUES ('s', ?)", (call,))
        db.execute("INSERT INTO items(session, payload) VALUES ('s', ?)", (result,))
        db.execute("COMMIT")
        if not tally.record(time.perf_counter() - t0):
            break
    db.close()

    def load() -> int:
        reader = sqlite3.connect(path)
        try:
            rows = reader.execute("SELECT payload FROM items WHERE session='s' ORDER BY id")
            return len([json.loads(p) for (p,) in rows])
        finally:
            reader.close()

    reload = median_reload(load)
    return tally.measured(
        system="floor",
        path=path,
        reload=reload,
        unit="items",
        base_mb=base,
        config=CONFIG,
    )
