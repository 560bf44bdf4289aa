"""Offloading: a large tool result is stored whole, content-addressed; the model sees a placeholder
with its size, hash, a handle and a short head/tail excerpt, and pages through it with
read_result / search_result."""

from __future__ import annotations

from bubu.context.policy import ContextPolicy
from bubu.events import BlobRef
from bubu.log.codec import sha256_hex


def line_count(data: bytes) -> int:
    """Lines in `data` (a last line without a newline counts)."""
    if not data:
        return 0
    return data.count(b"\n") + (0 if data.endswith(b"\n") else 1)


def _excerpt(lines: list[bytes], budget: int, *, from_end: bool = False) -> str:
    # The tail is filled from the last line backwards: the end of an output (the error, the
    # summary line of a test run) is what must survive the budget.
    out: list[str] = []
    used = 0
    for ln in reversed(lines) if from_end else lines:
        text = ln.decode("utf-8", "replace")
        if len(text) > 200:
            text = text[:200] + " …"
        if used + len(text) > budget:
            break
        out.append(text)
        used += len(text) + 1
    return "\n".join(reversed(out) if from_end else out)


def placeholder(
    tool: str, data: bytes, ref: BlobRef, policy: ContextPolicy, *, dropped: int = 0
) -> str:
    """The text the model sees in place of an offloaded result; `dropped`: bytes of the tool's
    output that were never kept, so the stored result is not all of it."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    n = policy.excerpt_lines
    half = policy.excerpt_bytes // 2
    head = _excerpt(lines[:n], half)
    tail = _excerpt(lines[-n:] if len(lines) > 2 * n else lines[n:], half, from_end=True)
    stored = (
        f"stored: {ref.size:,} bytes, {ref.lines:,} lines, sha256 {ref.sha256}; not the whole "
        f"output: {dropped:,} bytes from its middle were dropped and are stored nowhere"
        if dropped
        else f"stored whole: {ref.size:,} bytes, {ref.lines:,} lines, sha256 {ref.sha256}"
    )
    return (
        f"[large result of {tool} {stored}]\n"
        f"handle: {ref.sha256}\n"
        "See its structure with inspect_result{handle}, page through it with "
        "read_result{handle, offset, limit} or search it with search_result{handle, pattern}; "
        "do not re-run the tool to see it again.\n"
        f"--- first lines ---\n{head}\n" + (f"--- last lines ---\n{tail}\n" if tail else "")
    )


def offload_result(
    tool: str, data: bytes, policy: ContextPolicy, *, dropped: int = 0
) -> tuple[str, BlobRef] | None:
    """The placeholder and blob reference for `data`, or None when it is small enough inline."""
    if len(data) <= policy.offload_bytes:
        return None
    ref = BlobRef(sha256=sha256_hex(data), size=len(data), lines=line_count(data))
    return placeholder(tool, data, ref, policy, dropped=dropped), ref
