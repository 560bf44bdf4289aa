"""Write tests/fixtures/log_v1.jsonl: a schema-1 export covering the whole vocabulary.

Run once, from the tests directory, when a schema version is released:
`cd tests && python -m log.make_log_v1`. The file is committed and never regenerated for the same
version: it is what keeps upgrade-on-read honest for logs written by this version.
"""

from __future__ import annotations

import sys
import tempfile
from contextlib import closing
from pathlib import Path

from bubu.events import SCHEMA_VERSION
from bubu.log.sqlite import SQLiteStore
from bubu.log.transfer import export_lines

from .samples import ACTION_NAMES, CONTENT_KINDS, NOTE_KINDS, coverage, session_events

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / f"log_v{SCHEMA_VERSION}.jsonl"
SESSION = f"ses_fixture_v{SCHEMA_VERSION}"


def main() -> None:
    """Build the sample session in a scratch database and export it to the fixture file."""
    if FIXTURE.exists() and "--force" not in sys.argv:
        sys.exit(
            f"{FIXTURE} exists; released fixtures are never rewritten (use --force if unreleased)"
        )
    # Exports do not carry blobs, so the fixture's function_response keeps its result inline.
    events = session_events(SESSION, id_prefix=f"evt_v{SCHEMA_VERSION}", offload=False)
    assert coverage(events) == (set(CONTENT_KINDS), set(NOTE_KINDS), set(ACTION_NAMES))
    with (
        tempfile.TemporaryDirectory() as tmp,
        closing(SQLiteStore(Path(tmp) / "fixture.db")) as store,
    ):
        info = store.create_session(
            title="fixture: every kind",
            workspace="/work/fixture",
            model="scripted:demo.jsonl",
            session_id=SESSION,
        )
        expect = 0
        for batch in (events[:3], events[3:10], events[10:]):
            expect = store.append(SESSION, batch, expect=expect, durable=True).high_water
        lines = list(export_lines(store, store.session(info.id)))
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_bytes(b"".join(line + b"\n" for line in lines))
    print(f"wrote {FIXTURE} ({len(lines) - 1} events)")


if __name__ == "__main__":
    main()
