"""What a provable write keeps of the file it replaces, so that a rewind can put it back.

The content before a write is stored in the blob table, content-addressed under the very hash
the dispatch records as ``before_sha256``, in the dispatch's own transaction: a write whose
dispatch is committed has its earlier content committed too (or, above the cap, knowingly not).
Identical contents are stored once. A file that did not exist needs nothing kept: the dispatch's
``before_sha256`` is None and a rewind deletes it.

Two kinds of content are not kept, and a rewind says it cannot restore such a file:

- content larger than `KEEP_MAX_BYTES` (a generated file, a data set): the log would grow by
  that much per write;
- content holding a secret's value: secrets never enter the log (`bubu.log.redact`), and the
  redacted bytes would not be the file.
"""

from __future__ import annotations

from collections.abc import Iterable

from bubu.log import redact
from bubu.tools.base import WriteIntent

KEEP_MAX_BYTES = 2 * 1024 * 1024
"""The largest earlier content a write keeps (2 MiB); above it a rewind cannot restore the file."""


def kept_before(intents: Iterable[WriteIntent | None]) -> list[bytes]:
    """The earlier contents to store with the dispatches of `intents` (see the module docstring)."""
    out: list[bytes] = []
    for i in intents:
        if i is None or i.before is None or len(i.before) > KEEP_MAX_BYTES:
            continue
        if redact.data(i.before) != i.before:
            continue
        out.append(i.before)
    return out


__all__ = ["KEEP_MAX_BYTES", "kept_before"]
