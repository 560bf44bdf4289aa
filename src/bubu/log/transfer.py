"""Export a session as JSONL and import it back, verifying the chain on the way in."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import msgspec

from bubu import clock
from bubu.errors import CorruptLog, StorageError, UnknownSession
from bubu.events import Event, Record, SessionStarted, SystemNote, make
from bubu.log import codec, redact
from bubu.log.store import Head, SessionInfo, Store
from bubu.projections.origin import SessionFacts, disagreement, fold_facts

EXPORT_FORMAT = "bubu-session/1"


class _Header(msgspec.Struct, kw_only=True):
    format: str
    session: str
    title: str
    workspace: str
    model: str | None = None
    created_ms: int
    high_water: int
    digest: str
    blobs: int = 0
    """How many blob lines follow the header (offloaded results the events refer to, and the
    content writes replaced, kept for a rewind)."""


class _Blob(msgspec.Struct, kw_only=True):
    blob: str
    data: bytes


class _Line(msgspec.Struct, kw_only=True):
    seq: int
    hash: str
    event: msgspec.Raw


_enc = msgspec.json.Encoder(order="sorted")


def export_lines(store: Store, info: SessionInfo) -> Iterator[bytes]:
    """The header line, one `{"blob":sha,"data":base64}` line per referenced blob, then
    `{"event":…,"hash":…,"seq":…}` per event with its canonical bytes."""
    records = store.read(info.id)
    head = store.head(info.id)
    shas = list(
        dict.fromkeys(b.sha256 for r in records if (b := getattr(r.event.content, "blob", None)))
    )
    # The content each write replaced, where it was kept, so that a rewind works after an import.
    shas += [s for s in dict.fromkeys(_kept(records)) if s not in shas]
    blobs = [(sha, store.blob(sha)) for sha in shas]
    yield _enc.encode(
        _Header(
            format=EXPORT_FORMAT,
            session=info.id,
            title=info.title,
            workspace=info.workspace,
            model=info.model,
            created_ms=info.created_ms,
            high_water=head.high_water,
            digest=head.digest,
            blobs=sum(1 for _, data in blobs if data is not None),
        )
    )
    for sha, data in blobs:
        if data is not None:
            yield _enc.encode(_Blob(blob=sha, data=data))
    for r in records:
        yield b'{"event":' + codec.encode(r.event) + f',"hash":"{r.hash}","seq":{r.seq}}}'.encode()


def _kept(records: Sequence[Record]) -> Iterator[str]:
    for r in records:
        d = r.event.actions.tool_dispatch if r.event.actions is not None else None
        if d is not None and d.effect == "provable_write" and d.before_sha256:
            yield d.before_sha256


def import_lines(store: Store, lines: Sequence[bytes]) -> tuple[SessionInfo, Head]:
    """Verify an export and append it as a new session with the same id; all or nothing."""
    lines = [ln for ln in lines if ln.strip()]
    if not lines:
        raise CorruptLog("the file is empty")
    try:
        header = msgspec.json.decode(lines[0], type=_Header)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as e:
        raise CorruptLog(f"the first line is not a Bubu export header ({e})") from e
    if header.format != EXPORT_FORMAT:
        raise CorruptLog(
            f"unknown export format {header.format!r} (this Bubu reads {EXPORT_FORMAT})"
        )
    blobs: dict[str, bytes] = {}
    for n, raw in enumerate(lines[1 : 1 + header.blobs], start=2):
        try:
            b = msgspec.json.decode(raw, type=_Blob)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as e:
            raise CorruptLog(f"line {n} is not an exported blob ({e})") from e
        if codec.sha256_hex(b.data) != b.blob:
            raise CorruptLog(f"the blob on line {n} does not hash to its name {b.blob[:16]}…")
        blobs[b.blob] = b.data
    lines = [lines[0], *lines[1 + header.blobs :]]
    prev = codec.GENESIS
    events = []
    for n, raw in enumerate(lines[1:], start=1):
        try:
            line = msgspec.json.decode(raw, type=_Line)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as e:
            raise CorruptLog(f"line {n + 1} is not an exported event ({e})") from e
        payload = bytes(line.event)
        if line.seq != n:
            raise CorruptLog(f"seq {n} is missing (line {n + 1} has seq {line.seq})", seq=n)
        prev = codec.chain(prev, payload)
        if prev.hex() != line.hash:
            raise CorruptLog(f"the chain does not verify at seq {n}: the event was altered", seq=n)
        ev = codec.decode(payload, seq=n)
        if codec.encode(ev) != payload:
            raise CorruptLog(f"the event at seq {n} is not in canonical form", seq=n)
        if ev.session != header.session:
            raise CorruptLog(
                f"the event at seq {n} belongs to another session ({ev.session})", seq=n
            )
        ref = getattr(ev.content, "blob", None)
        if ref is not None and ref.sha256 not in blobs:
            raise CorruptLog(f"the event at seq {n} refers to a blob the file does not hold", seq=n)
        events.append(ev)
    if len(events) != header.high_water or prev.hex() != header.digest:
        raise CorruptLog(
            f"the file is truncated or altered: the header promises {header.high_water} events "
            f"ending in {header.digest[:16]}…, the file holds {len(events)}"
        )
    facts = imported_facts(events, header)
    try:
        store.session(header.session)
    except UnknownSession:
        pass
    else:
        raise StorageError(f"session {header.session} already exists in this database")
    leaked = redact.found_in(events, list(blobs.values()))
    if leaked is not None:
        raise StorageError(
            f"the file holds the value of {leaked}, a secret of this environment that Bubu keeps "
            f"out of its logs; unset {leaked} to import it as it is"
        )
    # Where it came from, as a chained fact after the copy: an imported session is continued
    # only when the user runs it explicitly.
    origin = make(
        session=header.session, role="system", author="host", ts=clock.now_ms(),
        visibility="hidden", content=SystemNote(note=SessionStarted(
            workspace=facts.workspace, title=facts.title, model=facts.model, origin="import",
            source=header.session, source_seq=header.high_water, source_digest=header.digest,
        )),
    )  # fmt: skip
    # One transaction: a crash leaves the session absent or complete, never half imported.
    info = store.create_session(
        title=facts.title,
        workspace=facts.workspace,
        model=facts.model,
        session_id=header.session,
        events=[*events, origin],
        blobs=list(blobs.values()),
    )
    copied = store.read(info.id, after=header.high_water - 1, upto=header.high_water)
    if header.high_water and (not copied or copied[-1].hash != header.digest):
        raise CorruptLog("the imported chain does not match the export (a bug); nothing is lost")
    return info, Head(high_water=header.high_water, digest=header.digest)


def imported_facts(events: Sequence[Event], header: _Header) -> SessionFacts:
    """The facts the export's chain records; refuses a header that says otherwise (the header
    is outside the chain, so an edit there breaks no hash)."""
    records = [Record(seq=n, hash="", event=e) for n, e in enumerate(events, start=1)]
    facts = fold_facts(
        records, workspace=header.workspace, title=header.title, model=header.model,
        first=records[0] if records else None,
    )  # fmt: skip
    wrong = disagreement(facts, workspace=header.workspace, title=header.title, model=header.model)
    if wrong:
        raise CorruptLog(
            f"the header does not match the session's chained facts: it gives {wrong}; the "
            "header was edited"
        )
    return facts
