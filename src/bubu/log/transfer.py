"""Export a session as JSONL and import it back, verifying the chain on the way in."""

from __future__ import annotations

import io
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO

import msgspec

from bubu import clock
from bubu.errors import CorruptLog, StorageError, UnknownSession
from bubu.events import Event, Record, SessionStarted, SystemNote, make
from bubu.lines import LineTooLong, bounded_lines
from bubu.log import codec, redact
from bubu.log.store import Head, SessionInfo, Store
from bubu.projections.origin import SessionFacts, disagreement, fold_facts
from bubu.snapshot import refs

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
    objects: int = 0
    """How many workspace object lines follow the blobs (the files and trees of the snapshots
    the events name)."""


class _Blob(msgspec.Struct, kw_only=True):
    blob: str
    data: bytes


class _Object(msgspec.Struct, kw_only=True):
    object: str
    data: bytes


def _addressed(
    lines: Iterator[tuple[int, bytes]],
    count: int,
    kind: type[_Blob] | type[_Object],
    what: str,
) -> Iterator[tuple[str, bytes]]:
    """The next `count` content-addressed lines (blobs or workspace objects) as (name, bytes),
    each checked to hash to its name; fewer if the file ends."""
    for _ in range(count):
        got = next(lines, None)
        if got is None:
            return
        n, raw = got
        try:
            item = msgspec.json.decode(raw, type=kind)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as e:
            raise CorruptLog(f"line {n} is not an exported {what} ({e})") from e
        name = item.blob if isinstance(item, _Blob) else item.object
        if codec.sha256_hex(item.data) != name:
            noun = what.rsplit(maxsplit=1)[-1]  # "blob", "object"
            raise CorruptLog(f"the {noun} on line {n} does not hash to its name {name[:16]}…")
        yield name, item.data


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
    # Walked twice (to count, then to write), so the objects are never all held at once.
    names = refs.roots(records)
    count = sum(1 for _, data in refs.objects_of(store.get_object, names) if data is not None)
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
            objects=count,
        )
    )
    for sha, data in blobs:
        if data is not None:
            yield _enc.encode(_Blob(blob=sha, data=data))
    for sha, data in refs.objects_of(store.get_object, names):
        if data is not None:
            yield _enc.encode(_Object(object=sha, data=data))
    for r in records:
        yield b'{"event":' + codec.encode(r.event) + f',"hash":"{r.hash}","seq":{r.seq}}}'.encode()


def _kept(records: Sequence[Record]) -> Iterator[str]:
    for r in records:
        d = r.event.actions.tool_dispatch if r.event.actions is not None else None
        if d is not None and d.effect == "provable_write" and d.before_sha256:
            yield d.before_sha256


IMPORT_LINE_LIMIT = 128 << 20
"""The longest line an export may have: a blob line holds up to a 64 MiB output in base64."""

_CHUNK = 2000
"""Events decoded and inserted at a time: an import holds one chunk in memory, not the file."""


def import_source(file: str) -> BinaryIO:
    """The file to import, seekable (an import reads it twice): standard input (`-`) is
    copied to a temporary file a chunk at a time, with the same bound on each line."""
    if file != "-":
        return open(file, "rb")
    spool = tempfile.SpooledTemporaryFile(max_size=8 << 20)  # noqa: SIM115
    run = 0  # bytes of the line being read
    ended = 0  # lines read to their end
    while chunk := sys.stdin.buffer.read(1 << 20):
        spool.write(chunk)
        cut = chunk.rfind(b"\n")
        run = run + len(chunk) if cut < 0 else len(chunk) - cut - 1
        ended += chunk.count(b"\n")
        if run > IMPORT_LINE_LIMIT:
            spool.close()
            raise LineTooLong(ended + 1, IMPORT_LINE_LIMIT, "the file")
    spool.seek(0)
    return spool  # type: ignore[return-value]


def import_lines(store: Store, lines: Sequence[bytes]) -> tuple[SessionInfo, Head]:
    """`import_file` over lines already in memory."""
    return import_file(store, io.BytesIO(b"\n".join(lines)))


def _lines(f: BinaryIO) -> Iterator[tuple[int, bytes]]:
    for n, raw in bounded_lines(f, limit=IMPORT_LINE_LIMIT, what="the file"):
        if raw.strip():
            yield n, raw


def _event_lines(
    lines: Iterator[tuple[int, bytes]], header: _Header, blobs: dict[str, bytes]
) -> Iterator[Event]:
    """The verified events after the header and blobs, decoded one line at a time."""
    prev = codec.GENESIS
    n = 0
    for number, raw in lines:
        n += 1
        try:
            line = msgspec.json.decode(raw, type=_Line)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as e:
            raise CorruptLog(f"line {number} is not an exported event ({e})") from e
        payload = bytes(line.event)
        if line.seq != n:
            raise CorruptLog(f"seq {n} is missing (line {number} has seq {line.seq})", seq=n)
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
        yield ev
    if n != header.high_water or prev.hex() != header.digest:
        raise CorruptLog(
            f"the file is truncated or altered: the header promises {header.high_water} events "
            f"ending in {header.digest[:16]}…, the file holds {n}"
        )


ObjectSink = Callable[[str, bytes], None]


def _head(
    f: BinaryIO, objects: ObjectSink | None = None
) -> tuple[_Header, dict[str, bytes], Iterator[tuple[int, bytes]]]:
    """The header, the blobs, and the lines after them; each workspace object (verified
    against its name) is handed to `objects`."""
    lines = _lines(f)
    first = next(lines, None)
    if first is None:
        raise CorruptLog("the file is empty")
    try:
        header = msgspec.json.decode(first[1], type=_Header)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as e:
        raise CorruptLog(f"the first line is not a Bubu export header ({e})") from e
    if header.format != EXPORT_FORMAT:
        raise CorruptLog(
            f"unknown export format {header.format!r} (this Bubu reads {EXPORT_FORMAT})"
        )
    blobs = dict(_addressed(lines, header.blobs, _Blob, "blob"))
    for sha, data in _addressed(lines, header.objects, _Object, "workspace object"):
        if objects is not None:
            objects(sha, data)
    return header, blobs, lines


def import_file(store: Store, f: BinaryIO) -> tuple[SessionInfo, Head]:
    """Verify an export and append it as a new session with the same id; all or nothing.

    `f` is read twice, a line at a time: once to verify the whole chain and gather the
    session's facts, once to insert the events in chunks inside one transaction. Memory holds
    the blobs and one chunk of events, not the file."""
    start = f.tell()
    names: set[str] = set()
    leaks: list[str] = []
    r = redact.current()

    def look(sha: str, data: bytes) -> None:
        names.add(sha)
        if r is not None and not leaks and (found := r.found(data)) is not None:
            leaks.append(found)

    header, blobs, lines = _head(f, look)
    notes: list[Record] = []
    first: Record | None = None
    leaked = None if r is None else next(filter(None, map(r.found, blobs.values())), None)
    shape = redact.shape_in((), list(blobs.values()))
    leaked = leaked or next(iter(leaks), None)
    for n, ev in enumerate(_event_lines(lines, header, blobs), start=1):
        if leaked is None and r is not None:
            leaked = r.found(codec.encode(ev))
        if shape is None:
            shape = redact.shape_in((ev,))
        rec = Record(seq=n, hash="", event=ev)
        missing = [t for t in refs.roots([rec]) if t not in names]
        if missing:
            raise CorruptLog(
                f"the event at seq {n} names a workspace snapshot the file does not hold", seq=n
            )
        if n == 1:
            first = rec
        if isinstance(ev.content, SystemNote):
            notes.append(rec)
    facts = imported_facts(notes, header, first=first)
    try:
        store.session(header.session)
    except UnknownSession:
        pass
    else:
        raise StorageError(f"session {header.session} already exists in this database")
    if leaked is not None:
        raise StorageError(
            f"the file holds the value of {leaked}, a secret of this environment that Bubu keeps "
            f"out of its logs; unset {leaked} to import it as it is"
        )
    if shape is not None:
        raise StorageError(
            f"the file holds a value that looks like a {shape}, which Bubu keeps out of its logs "
            "and cannot take out of an exported chain; read the file itself to see the session"
        )
    # Where it came from, as a chained fact after the copy: an imported session is continued
    # only when the user runs it explicitly.
    origin = make(
        session=header.session,
        role="system",
        author="host",
        ts=clock.now_ms(),
        visibility="hidden",
        content=SystemNote(
            note=SessionStarted(
                workspace=facts.workspace,
                title=facts.title,
                model=facts.model,
                origin="import",
                source=header.session,
                source_seq=header.high_water,
                source_digest=header.digest,
            )
        ),
    )

    # The snapshots' objects go in first, in transactions of their own: the events that name
    # them are committed after (an import cut short leaves only unnamed objects behind).
    if header.objects:
        f.seek(start)
        batch: dict[str, bytes] = {}

        def put(sha: str, data: bytes) -> None:
            batch[sha] = data
            if sum(map(len, batch.values())) >= 32 << 20:
                _put_missing(store, batch)

        _head(f, put)
        _put_missing(store, batch)

    def chunks() -> Iterator[list[Event]]:
        # The second pass verifies again, so a file changed between the passes is refused
        # (inside the transaction: nothing of it stays).
        f.seek(start)
        _, _, again = _head(f)
        chunk: list[Event] = []
        for ev in _event_lines(again, header, blobs):
            chunk.append(ev)
            if len(chunk) >= _CHUNK:
                yield chunk
                chunk = []
        yield [*chunk, origin]

    # One transaction: a crash leaves the session absent or complete, never half imported.
    info = store.create_session_in_chunks(
        title=facts.title,
        workspace=facts.workspace,
        model=facts.model,
        session_id=header.session,
        chunks=chunks(),
        blobs=list(blobs.values()),
    )
    copied = store.read(info.id, after=header.high_water - 1, upto=header.high_water)
    if header.high_water and (not copied or copied[-1].hash != header.digest):
        raise CorruptLog("the imported chain does not match the export (a bug); nothing is lost")
    return info, Head(high_water=header.high_water, digest=header.digest)


def _put_missing(store: Store, batch: dict[str, bytes]) -> None:
    """Store the objects of `batch` the store lacks, and empty it."""
    missing = store.missing_objects(batch)
    store.put_objects({s: batch[s] for s in missing})
    batch.clear()


def put_snapshots(src: Store, dst: Store, records: Sequence[Record]) -> str | None:
    """Copy the objects of every snapshot the records name from `src` to `dst` (files before
    trees, in batches); the first missing object's name if `src` lacks one."""
    batch: dict[str, bytes] = {}
    size = 0
    for sha, data in refs.objects_of(src.get_object, refs.roots(records)):
        if data is None:
            return sha
        batch[sha] = data
        size += len(data)
        if size >= 32 << 20:
            _put_missing(dst, batch)
            size = 0
    _put_missing(dst, batch)
    return None


def imported_facts(
    notes: Sequence[Record], header: _Header, *, first: Record | None
) -> SessionFacts:
    """The facts the export's chain records (`notes`: its system notes; `first`: its seq-1
    record); refuses a header that says otherwise (the header is outside the chain, so an edit
    there breaks no hash)."""
    facts = fold_facts(
        notes,
        workspace=header.workspace,
        title=header.title,
        model=header.model,
        first=first,
    )
    wrong = disagreement(facts, workspace=header.workspace, title=header.title, model=header.model)
    if wrong:
        raise CorruptLog(
            f"the header does not match the session's chained facts: it gives {wrong}; the "
            "header was edited"
        )
    return facts
