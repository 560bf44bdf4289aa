"""Recompute a session's hash chain from stored rows (backend-independent)."""

from __future__ import annotations

from collections.abc import Sequence

from bubu.errors import BubuError
from bubu.log import codec
from bubu.log.store import VerifyReport


def verify_records(
    session: str, rows: Sequence[tuple[int, bytes, bytes]], blobs_ok: dict[str, bool] | None = None
) -> VerifyReport:
    """Check (seq, hash, payload) rows: gapless seq from 1, each hash = H(prev ‖ payload), each
    payload decodes to an event of this session, each referenced blob present and intact."""
    prev = codec.GENESIS
    expected = 1
    for seq, stored, payload in rows:

        def bad(problem: str, seq: int = seq, prev: bytes = prev) -> VerifyReport:
            return VerifyReport(
                session=session,
                ok=False,
                high_water=len(rows),
                digest=prev.hex(),
                first_bad_seq=seq,
                problem=problem,
            )

        if seq != expected:
            return bad(f"seq {expected} is missing (found {seq})", expected)
        prev = codec.chain(prev, bytes(payload))
        if prev != bytes(stored):
            return bad(f"the hash at seq {seq} does not match its content (altered or damaged)")
        try:
            ev = codec.decode(payload, seq=seq)
        except BubuError as e:
            return bad(str(e))
        if ev.session != session:
            return bad(f"the event at seq {seq} belongs to session {ev.session}")
        blob = getattr(ev.content, "blob", None)
        if blob is not None and blobs_ok is not None and not blobs_ok.get(blob.sha256, False):
            return bad(
                f"the blob {blob.sha256[:12]}… referenced at seq {seq} is missing or damaged"
            )
        expected += 1
    return VerifyReport(session=session, ok=True, high_water=len(rows), digest=prev.hex())


def verify_blob_refs(payload: bytes) -> list[str]:
    """The blob hashes an event's canonical bytes refer to (none if the bytes do not decode:
    the chain check reports a damaged event at its seq)."""
    try:
        ev = codec.decode(payload)
    except BubuError:
        return []
    blob = getattr(ev.content, "blob", None)
    return [] if blob is None else [blob.sha256]
