"""The recovery notice as the page shows it: each recovered call with its dispatch arguments and,
for a write, the diff between the file now and the content the call intended to write.

The intended content comes from the call's arguments: `write_file` names it whole; for `edit_file`
the recorded old → new replacement is applied to the file as it is now (when the old text is
still there). The file's hash now is compared with the hashes the dispatch recorded, so the page
says whether the file is *before*, *after* or neither.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Sequence
from typing import Literal

import msgspec

from bubu.events import (
    JSON,
    EffectClass,
    FunctionCall,
    Record,
    RecoveryDecision,
    RecoveryNotice,
    SystemNote,
    ToolDispatch,
)
from bubu.projections.recovery import label
from bubu.projections.status import fold_status
from bubu.projections.transcript import notice_text

MAX_DIFF_BYTES = 2_000_000
"""Files larger than this are not read for a diff."""

Match = Literal["after", "before", "neither", "absent"]


class CallReview(msgspec.Struct, kw_only=True):
    """One call recovery decided about, with what the page needs to review it."""

    call_id: str
    tool: str
    label: str
    decision: RecoveryDecision
    reason: str
    effect: EffectClass | None
    dispatch_seq: int
    arguments: dict[str, JSON]
    path: str | None = None
    before_sha256: str | None = None
    after_sha256: str | None = None
    current_sha256: str | None = None
    matches: Match | None = None
    diff: str | None = None
    diff_note: str | None = None


class NoticeView(msgspec.Struct, kw_only=True):
    """The latest recovery notice of a session."""

    seq: int
    status: Literal["ready", "blocked"]
    text: str
    silent_retries: list[str]
    verified_applied: list[str]
    pending_review: list[str]
    dropped_model_calls: int
    reason: str | None
    dismissed: bool
    calls: list[CallReview]
    leftovers: list[str] = msgspec.field(default_factory=list)


def notice_view(
    records: Sequence[Record], notice_seq: int, notice: RecoveryNotice, *, dismissed: bool
) -> NoticeView:
    """The notice at `notice_seq` with a review of each call it names: every recovery decision
    committed since the previous notice (an earlier recovery may have died before its own)."""
    calls: dict[str, FunctionCall] = {}
    dispatches: dict[int, ToolDispatch] = {}
    start = 0
    for r in records:
        if r.seq >= notice_seq:
            break
        c, a = r.event.content, r.event.actions
        if isinstance(c, FunctionCall):
            calls[c.call_id] = c
        elif isinstance(c, SystemNote) and isinstance(c.note, RecoveryNotice):
            start = r.seq  # a notice names the decisions committed since the previous one
        if a is not None and a.tool_dispatch is not None:
            dispatches[r.seq] = a.tool_dispatch
    reviews: list[CallReview] = []
    seen: set[str] = set()
    for r in records:
        a = r.event.actions
        if not start < r.seq < notice_seq or a is None or a.tool_recovery is None:
            continue
        rec = a.tool_recovery
        if rec.call_id in seen:
            continue
        seen.add(rec.call_id)
        call = calls.get(rec.call_id)
        args = dict(call.arguments) if call is not None else {}
        review = CallReview(
            call_id=rec.call_id,
            tool=rec.tool,
            label=label(rec.tool, args),
            decision=rec.decision,
            reason=rec.reason,
            effect=None,
            dispatch_seq=rec.dispatch_seq,
            arguments=args,
        )
        d = dispatches.get(rec.dispatch_seq)
        if d is not None:
            review.effect = d.effect
            if d.path is not None:
                _review_write(review, d)
        reviews.append(review)
    return NoticeView(
        seq=notice_seq,
        status=notice.status,
        text=notice_text(notice, ongoing=fold_status(records).state in ("open", "queued")),
        silent_retries=list(notice.silent_retries),
        verified_applied=list(notice.verified_applied),
        pending_review=list(notice.pending_review),
        dropped_model_calls=notice.dropped_model_calls,
        reason=notice.reason,
        dismissed=dismissed,
        calls=reviews,
        leftovers=list(notice.leftovers),
    )


def _review_write(review: CallReview, d: ToolDispatch) -> None:
    """Fill in the hashes, which one the file matches now, and the diff to the intended content."""
    assert d.path is not None
    review.path, review.before_sha256, review.after_sha256 = d.path, d.before_sha256, d.after_sha256
    current, problem = _read(d.path)
    if problem is not None:
        review.diff_note = problem
        return
    now = None if current is None else hashlib.sha256(current).hexdigest()
    review.current_sha256 = now
    if now is not None and now == d.after_sha256:
        review.matches = "after"
    elif now == d.before_sha256:
        review.matches = "before"
    else:
        review.matches = "absent" if now is None else "neither"
    intended, note = _intended(review.tool, review.arguments, current, review.matches)
    if intended is None:
        review.diff_note = note
        return
    if hashlib.sha256(intended).hexdigest() != d.after_sha256:
        note = "the intended content no longer hashes to the recorded after-hash (the file changed)"
    if intended == (current or b""):
        if review.matches != "after":  # otherwise `matches` already says so
            review.diff_note = note or "the file now is exactly the intended content"
        return
    old_lines = _text(current or b"").splitlines(keepends=True)
    new_lines = _text(intended).splitlines(keepends=True)
    review.diff = "".join(
        difflib.unified_diff(
            old_lines, new_lines, fromfile=f"{d.path} (now)", tofile=f"{d.path} (intended)"
        )
    )
    review.diff_note = note


def _read(path: str) -> tuple[bytes | None, str | None]:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_DIFF_BYTES + 1)
    except FileNotFoundError:
        return None, None
    except OSError as e:
        return None, f"the file cannot be read now ({e.strerror})"
    if len(data) > MAX_DIFF_BYTES:
        return None, f"the file is larger than {MAX_DIFF_BYTES:,} bytes; it is not diffed here"
    return data, None


def _intended(
    tool: str, args: dict[str, JSON], current: bytes | None, matches: Match
) -> tuple[bytes | None, str | None]:
    """The content the call meant the file to have, or None and why it cannot be derived."""
    if tool == "write_file":
        content = args.get("content")
        if isinstance(content, str):
            return content.encode("utf-8", "surrogatepass"), None
        return None, "the call's arguments have no content to compare with"
    if tool == "edit_file":
        old, new = args.get("old"), args.get("new")
        if not isinstance(old, str) or not isinstance(new, str) or not old:
            return None, "the call's arguments have no old/new text to apply"
        if current is None:
            return None, "the file does not exist now, so the edit cannot be applied to it"
        if matches == "after":
            return current, None
        o, n = old.encode("utf-8", "surrogatepass"), new.encode("utf-8", "surrogatepass")
        if o not in current:
            return None, "the text the edit replaces is not in the file now"
        return current.replace(o, n, -1 if args.get("replace_all") is True else 1), None
    return None, f"{tool} is not a write Bubu can diff"


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


__all__ = ["CallReview", "NoticeView", "notice_view"]
