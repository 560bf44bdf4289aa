"""`bubu copy-store`: copy sessions between stores (SQLite and PostgreSQL, either way).

A session is copied only if its chain verifies in the source, and counts as copied only if the
copy verifies in the destination with the same digest. Sessions already in the destination are
never overwritten.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import click

from bubu.cli.app import cli, emit_json, fail
from bubu.cli.term import echo
from bubu.errors import BubuError, StorageError, UnknownSession
from bubu.log import codec, open_store, redact
from bubu.log.store import SessionInfo, Store
from bubu.log.transfer import put_snapshots

Outcome = Literal["copied", "skipped", "refused", "failed"]


@dataclass(frozen=True, slots=True, kw_only=True)
class CopyResult:
    """What happened to one session."""

    session: str
    result: Outcome
    high_water: int = 0
    digest: str | None = None
    reason: str | None = None


def _exists(store: Store, session: str) -> bool:
    try:
        return store.session(session).id == session
    except UnknownSession:
        return False


def copy_session(src: Store, dst: Store, info: SessionInfo) -> CopyResult:
    """Copy one session from `src` to `dst` byte for byte, verifying both ends."""
    sid = info.id
    before = src.verify(sid)
    if not before.ok:
        return CopyResult(
            session=sid,
            result="refused",
            reason=f"it does not verify in SRC at seq {before.first_bad_seq}: {before.problem}",
        )
    if _exists(dst, sid):
        return CopyResult(session=sid, result="skipped", reason="it already exists in DST")
    # Only the verified prefix: a live session may grow while it is copied.
    records = src.read(sid, upto=before.high_water)
    prev = codec.GENESIS
    blobs: dict[str, bytes] = {}
    for r in records:
        # The destination re-encodes events; an event whose bytes would change (an older schema
        # upgraded on read) would break the digest, so it is refused before anything is written.
        prev = codec.chain(prev, codec.encode(r.event))
        if prev.hex() != r.hash:
            return CopyResult(
                session=sid,
                result="refused",
                reason=f"the event at seq {r.seq} would not keep its bytes (an older schema); "
                "export it with `bubu export` instead",
            )
        ref = getattr(r.event.content, "blob", None)
        if ref is not None and ref.sha256 not in blobs:
            data = src.blob(ref.sha256)
            if data is None:
                return CopyResult(
                    session=sid, result="refused", reason=f"blob {ref.sha256[:12]}… is missing"
                )
            blobs[ref.sha256] = data
    leaked = redact.found_in([r.event for r in records], list(blobs.values()))
    if leaked is not None:
        return CopyResult(
            session=sid,
            result="refused",
            reason=f"it holds the value of {leaked}, a secret of this environment that Bubu keeps "
            f"out of its logs; unset {leaked} to copy it as it is",
        )
    shape = redact.shape_in([r.event for r in records], list(blobs.values()))
    if shape is not None:
        return CopyResult(
            session=sid,
            result="refused",
            reason=f"it holds a value that looks like a {shape}, which Bubu keeps out of its "
            "logs and cannot take out of a chain; export it to read it",
        )
    # The workspace snapshots' objects first: never an event naming a tree DST lacks.
    lost = put_snapshots(src, dst, records)
    if lost is not None:
        return CopyResult(
            session=sid, result="refused", reason=f"workspace object {lost[:12]}… is missing"
        )
    try:
        # With its events in one transaction: an interrupted copy leaves nothing to skip later.
        dst.create_session(
            title=info.title,
            workspace=info.workspace,
            model=info.model,
            session_id=sid,
            events=[r.event for r in records],
            blobs=list(blobs.values()),
        )
    except StorageError:
        if _exists(dst, sid):  # created by someone else in the meantime
            return CopyResult(session=sid, result="skipped", reason="it already exists in DST")
        raise
    after = dst.verify(sid)
    if not after.ok or (after.high_water, after.digest) != (before.high_water, before.digest):
        return CopyResult(
            session=sid,
            result="failed",
            high_water=after.high_water,
            digest=after.digest,
            reason=f"the copy in DST does not match SRC ({after.problem or 'the digest differs'}); "
            "do not use it",
        )
    return CopyResult(
        session=sid, result="copied", high_water=after.high_water, digest=after.digest
    )


def _open_source(src: str) -> Store:
    if not src.startswith(("postgresql://", "postgres://")) and not Path(src).expanduser().exists():
        fail(f"the source database {src} does not exist; check SRC")
    return open_store(src)


@cli.command("copy-store")
@click.argument("src", metavar="SRC")
@click.argument("dst", metavar="DST")
@click.option(
    "--session",
    "-s",
    "refs",
    multiple=True,
    metavar="ID",
    help="Copy only this session (an id or a unique prefix); repeatable. Default: every session.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def copy_store_cmd(src: str, dst: str, refs: tuple[str, ...], as_json: bool) -> None:
    """Copy sessions from the store SRC to the store DST (SQLite paths or postgresql:// URLs).

    Each session's chain is verified in SRC before and in DST after the copy; a session that
    already exists in DST is skipped. Exits 1 if any session was not copied.
    """
    if src == dst:
        fail("SRC and DST are the same store; name two different ones")
    results: list[CopyResult] = []
    with contextlib.ExitStack() as stack:
        source = stack.enter_context(_open_source(src))
        target = stack.enter_context(open_store(dst))
        # Oldest first by default, so DST lists the sessions in the same order as SRC.
        wanted: list[str | SessionInfo] = [*refs] if refs else [*source.sessions()[::-1]]
        for item in wanted:
            try:
                info = source.session(item) if isinstance(item, str) else item
            except UnknownSession as e:
                results.append(CopyResult(session=str(item), result="refused", reason=str(e)))
                continue
            try:
                results.append(copy_session(source, target, info))
            except BubuError as e:
                results.append(CopyResult(session=info.id, result="failed", reason=str(e)))
    ok = all(r.result == "copied" for r in results)
    if as_json:
        emit_json({"ok": ok, "sessions": results})
    else:
        for r in results:
            if r.result == "copied":
                digest = (r.digest or "")[:16]
                click.echo(f"copied   {r.session}  {r.high_water} events  {digest}")
            else:
                echo(f"{r.result:<8} {r.session}  {r.reason}")
        if not results:
            click.echo("no sessions to copy")
    if not ok:
        missed = sum(r.result != "copied" for r in results)
        if as_json:
            sys.exit(1)
        fail(f"{missed} of {len(results)} sessions were not copied (see above)")
