"""What the workspace snapshots tell about a step: which files it changed, as facts for the
model (an interrupted call's result), the recovery notice and the commands that show changes."""

from __future__ import annotations

from dataclasses import dataclass

from bubu.context.offload import line_count
from bubu.errors import BubuError
from bubu.events import BlobRef, WorkspaceSnapshot
from bubu.log import codec, redact
from bubu.log.store import Store
from bubu.snapshot import diff, tree

LISTED = 40
"""Paths named inline in a result; the rest are in the full diff behind its handle."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkspaceChange:
    """The workspace now against a snapshot taken earlier (`since`)."""

    since: str
    now: WorkspaceSnapshot
    changed: list[diff.Changed]
    diff: bytes

    def sentence(self, *, skip: str | None = None) -> str:
        """The change as one bounded paragraph (paths beyond `LISTED` are only in the diff);
        `skip` leaves out one path (a write's own target)."""
        changed = [c for c in self.changed if c.path != skip]
        if not changed:
            other = " else" if skip else ""
            return (
                f"Nothing{other} in the workspace changed since the call was dispatched "
                "(compared with Bubu's snapshot of it; ignored paths are not covered)."
            )
        n = len(changed)
        lines = "; ".join(c.line() for c in changed[:LISTED])
        more = f"; and {n - LISTED} more" if n > LISTED else ""
        what = "other path" if skip else "path"
        return (
            f"Since the call was dispatched, {n} {what}{'s' if n != 1 else ''} changed in the "
            f"workspace (compared with Bubu's snapshot of it): {lines}{more}."
        )

    def result(self, head: str) -> tuple[str, bytes | None, BlobRef | None]:
        """An interrupted call's result: `head` and the change as the model sees it inline, and
        the whole (those words, then the full diff) stored behind a handle, or no blob when
        nothing changed."""
        words = f"{head} {self.sentence()}"
        if not self.diff:
            return words, None, None
        # Redacted before it is named: the store would redact it anyway, and the name must hold.
        whole = redact.data(f"{words}\n\n".encode() + self.diff)
        ref = BlobRef(sha256=codec.sha256_hex(whole), size=len(whole), lines=line_count(whole))
        text = (
            f"{words} The full diff ({ref.lines:,} lines) is stored whole: handle {ref.sha256}; "
            "page it with read_result{handle, offset, limit} or search it with "
            "search_result{handle, pattern}."
        )
        return text, whole, ref


def change_since(
    store: Store, since: WorkspaceSnapshot | None, now: WorkspaceSnapshot | None
) -> WorkspaceChange | None:
    """The change from `since` to `now`, or None when either has no tree (snapshots off, or
    one failed) or the store lacks an object of them."""
    if since is None or now is None or since.tree is None or now.tree is None:
        return None
    try:
        changes = tree.changes(store.get_object, since.tree, now.tree)
        changed = diff.summarize(store.get_object, changes)
        full = diff.unified(store.get_object, changes).encode("utf-8", "replace")
    except BubuError:  # a damaged store must not stop recovery: it falls back to the old words
        return None
    return WorkspaceChange(since=since.tree, now=now, changed=changed, diff=full)
