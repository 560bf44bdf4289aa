"""What the PostgreSQL tests share: the server's URL and a small session with an offloaded blob."""

from __future__ import annotations

from bubu.events import BlobRef, Event, FunctionCall, FunctionResponse, Text, make
from bubu.log import codec
from bubu.log.store import Store

BLOB = ("a line of tool output too long to keep inline\n" * 300).encode()
TS = 1_700_000_000_000


def sample_events(session: str, n: int = 3) -> list[Event]:
    """`n` user texts, then a tool call whose result was offloaded to `BLOB`."""
    events = [
        make(session=session, role="user", author="user", ts=TS + i, content=Text(text=f"m{i}"))
        for i in range(n)
    ]
    ref = BlobRef(sha256=codec.sha256_hex(BLOB), size=len(BLOB), lines=BLOB.count(b"\n"))
    events.append(
        make(
            session=session,
            role="model",
            author="agent",
            ts=TS + n,
            content=FunctionCall(call_id="c1", name="run_command", arguments={"command": "ls"}),
        )
    )
    events.append(
        make(
            session=session,
            role="tool",
            author="tool",
            ts=TS + n + 1,
            content=FunctionResponse(
                call_id="c1", name="run_command", result="(offloaded)", blob=ref
            ),
        )
    )
    return events


def filled(store: Store, title: str = "task", *, n: int = 3) -> str:
    """A new session holding `sample_events` (and its blob); returns its id."""
    sid = store.create_session(title=title, workspace="/work/p", model="scripted:x").id
    store.append(sid, sample_events(sid, n), expect=0, blobs=[BLOB], durable=True)
    return sid
