"""The next model request, projected from the log (DESIGN §6).

    [checkpoint summary + fact sheet, if any]   covers events 1..watermark
    [entries after the watermark]               user messages and model steps with their results

`ContextFold` is fed records in seq order. Each model step keeps its assistant parts and the results
paired to its calls; a call whose outcome is not committed is left out, so a provider never sees a
dangling tool call. Offloaded results are whole while hot (the most recent steps) and placeholders
once cold. Rendering is cached per entry, so building the next request costs what changed.

Blob contents are data, not a callback: `hot_blobs` (or `span_blobs`) names the offloaded results
a rendering shows whole, the caller reads those bytes, and passes them in as a mapping from sha-256
to bytes. The bytes are content-addressed and immutable, so the same prefix and the same blobs
always give the same request; a blob that is not given renders as its placeholder.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import msgspec

from bubu.context.policy import ContextPolicy
from bubu.events import (
    FunctionCall,
    FunctionResponse,
    ImageRef,
    ProcessEnded,
    ProjectInstructions,
    Record,
    SystemNote,
    Text,
    Thinking,
)
from bubu.messages import (
    AssistantMessage,
    AssistantPart,
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    ToolResultsMessage,
    UserMessage,
    canonical,
)

Blobs = Mapping[str, bytes]
"""Offloaded results' bytes by sha-256: the hot ones a request shows whole."""
NO_BLOBS: Blobs = {}


class Checkpoint(msgspec.Struct, frozen=True, kw_only=True):
    """A validated summary of events 1..watermark, as the request uses it."""

    key: str
    watermark: int
    source_digest: str
    text: str


class _Result(msgspec.Struct):
    part: ToolResultPart
    blob: str | None = None
    size: int = 0


class _Step(msgspec.Struct):
    first_seq: int
    parts: list[AssistantPart] = msgspec.field(default_factory=list)
    calls: list[str] = msgspec.field(default_factory=list)
    results: dict[str, _Result] = msgspec.field(default_factory=dict)


class _User(msgspec.Struct):
    first_seq: int
    message: UserMessage


class _Rendered(msgspec.Struct, frozen=True):
    messages: tuple[Message, ...]
    digests: bytes
    size: int


_encoder = msgspec.json.Encoder(order="sorted")


class ContextFold(msgspec.Struct):
    """The conversation as the model sees it, folded incrementally."""

    policy: ContextPolicy = msgspec.field(default_factory=ContextPolicy)
    checkpoint: Checkpoint | None = None
    omitted_before: int = 0
    """A fallback floor: entries at or below this seq are left out (a failed compaction)."""
    entries: list[_User | _Step] = msgspec.field(default_factory=list)
    by_invocation: dict[str, _Step] = msgspec.field(default_factory=dict)
    by_call: dict[str, _Step] = msgspec.field(default_factory=dict)
    high_water: int = 0
    _rendered: list[_Rendered | None] = msgspec.field(default_factory=list)
    _hot: list[bool] = msgspec.field(default_factory=list)
    _index: dict[int, int] = msgspec.field(default_factory=dict)
    _steps: list[int] = msgspec.field(default_factory=list)
    _seqs: list[int] = msgspec.field(default_factory=list)
    """The first seq of each entry: increasing, so the visible ones are found by bisection."""
    # The visible entries flattened, with a running digest and size after each entry; valid from
    # _flat_start up to the first entry that changed, so a request extends what the last one built.
    _flat_start: int = -1
    _flat: list[Message] = msgspec.field(default_factory=list)
    _cum: list[tuple[int, int, Any]] = msgspec.field(default_factory=list)
    _image_blobs: list[tuple[int, str]] = msgspec.field(default_factory=list)
    """(entry index, sha-256) of every image an entry shows: read with the hot results."""
    _instructions: list[tuple[int, ProjectInstructions]] = msgspec.field(default_factory=list)
    """Project instruction notes in the history: those a checkpoint covers are re-stated."""

    def apply(self, r: Record) -> None:
        """Fold one record in."""
        self.high_water = r.seq
        ev = r.event
        if ev.visibility == "hidden":
            return
        c = ev.content
        if ev.role == "user" and isinstance(c, Text):
            self._add(_User(r.seq, UserMessage(text=c.text, images=self._images(c.images))))
            self._note_images(len(self.entries) - 1, c.images)
        elif ev.role == "model" and isinstance(c, Text | Thinking | FunctionCall):
            key = ev.invocation or f"seq{r.seq}"
            step = self.by_invocation.get(key)
            if step is None:
                step = self.by_invocation[key] = _Step(r.seq)
                self._add(step)
            self._touch(step)
            if isinstance(c, Text):
                if c.text:
                    step.parts.append(TextPart(text=c.text, native=c.native))
            elif isinstance(c, Thinking):
                step.parts.append(
                    ThinkingPart(
                        text=c.text, signature=c.signature, redacted=c.redacted, native=c.native
                    )
                )
            else:
                step.parts.append(
                    ToolCallPart(
                        call_id=c.call_id,
                        name=c.name,
                        arguments=c.arguments,
                        raw_arguments=c.raw_arguments,
                        native=c.native,
                    )
                )
                step.calls.append(c.call_id)
                self.by_call[c.call_id] = step
        elif isinstance(c, SystemNote) and isinstance(c.note, ProcessEnded):
            from bubu.projections.processes import died_text

            self._add(_User(r.seq, UserMessage(text=died_text(c.note))))
        elif isinstance(c, SystemNote) and isinstance(c.note, ProjectInstructions):
            from bubu.projections.instructions import history_text

            self._add(_User(r.seq, UserMessage(text=history_text(c.note))))
            self._instructions.append((r.seq, c.note))
        elif isinstance(c, FunctionResponse):
            owner = self.by_call.get(c.call_id)
            if owner is not None and c.call_id not in owner.results:
                part = ToolResultPart(
                    call_id=c.call_id,
                    name=c.name,
                    content=c.result,
                    is_error=c.is_error,
                    images=self._images(c.images),
                )
                blob = None if c.blob is None else c.blob.sha256
                owner.results[c.call_id] = _Result(part, blob, 0 if c.blob is None else c.blob.size)
                self._note_images(self._index[id(owner)], c.images)
                self._touch(owner)

    # -- cache ------------------------------------------------------------------------------------

    def _add(self, entry: _User | _Step) -> None:
        i = len(self.entries)
        self._index[id(entry)] = i
        self.entries.append(entry)
        self._seqs.append(entry.first_seq)
        self._rendered.append(None)
        self._hot.append(isinstance(entry, _Step))
        if isinstance(entry, _Step):
            self._steps.append(i)
            # The step that just left the hot window renders its large results as placeholders.
            if len(self._steps) > self.policy.hot_steps:
                cold = self._steps[-self.policy.hot_steps - 1]
                self._hot[cold] = False
                if any(res.blob for res in self._step(cold).results.values()):
                    self._invalidate(cold)

    def _step(self, i: int) -> _Step:
        e = self.entries[i]
        assert isinstance(e, _Step)
        return e

    def _touch(self, entry: _Step) -> None:
        self._invalidate(self._index[id(entry)])

    def _invalidate(self, i: int) -> None:
        self._rendered[i] = None
        keep = i - self._flat_start
        if 0 <= keep < len(self._cum):
            del self._cum[keep:]
            del self._flat[self._cum[-1][0] if self._cum else 0 :]

    def _build(self, blobs: Blobs) -> tuple[list[Message], int, Any]:
        """The visible entries' messages, total size and running digest, extended incrementally.

        Only a rendering made with every blob it shows is cached: without some of them (a caller
        that did not pass them, a blob missing from the store) the request is built afresh."""
        if not self._complete(blobs):
            flat: list[Message] = []
            size, h = 0, hashlib.sha256()
            for i in self._visible():
                r = self._rendering(i, blobs)
                flat.extend(r.messages)
                size += r.size
                h.update(r.digests)
            return flat, size, h
        start = self._visible().start
        if start != self._flat_start:
            self._flat_start, self._flat, self._cum = start, [], []
        for i in range(start + len(self._cum), len(self.entries)):
            r = self._render_at(i, blobs)
            if self._cum:
                _, size, h = self._cum[-1]
                h = h.copy()
            else:
                size, h = 0, hashlib.sha256()
            h.update(r.digests)
            self._flat.extend(r.messages)
            self._cum.append((len(self._flat), size + r.size, h))
        if not self._cum:
            return self._flat, 0, hashlib.sha256()
        return self._flat, self._cum[-1][1], self._cum[-1][2]

    def _visible(self) -> range:
        # Entries come in seq order: skip the covered ones by bisection, not by looking at each,
        # so building a request costs what it holds, not the length of the log.
        floor = max(self.omitted_before, self.checkpoint.watermark if self.checkpoint else 0)
        return range(bisect.bisect_right(self._seqs, floor), len(self.entries))

    def _complete(self, blobs: Blobs) -> bool:
        return all(b in blobs for b in self.hot_blobs())

    def _rendering(self, i: int, blobs: Blobs) -> _Rendered:
        msgs = self._render(self.entries[i], self._hot[i], blobs)
        encoded = [canonical(m) for m in msgs]
        return _Rendered(
            messages=msgs,
            digests=b"".join(hashlib.sha256(b).digest() for b in encoded),
            size=sum(len(b) for b in encoded),
        )

    def _render_at(self, i: int, blobs: Blobs) -> _Rendered:
        rendered = self._rendered[i]
        if rendered is None:
            rendered = self._rendering(i, blobs)
            e = self.entries[i]
            if any(sha not in blobs for j, sha in self._image_blobs if j == i):
                return rendered
            if not (
                self._hot[i]
                and isinstance(e, _Step)
                and any(
                    r.blob not in blobs for r in e.results.values() if self._shows_whole(r, True)
                )
            ):
                self._rendered[i] = rendered
        return rendered

    def _render(
        self, e: _User | _Step, hot: bool, blobs: Blobs, *, whole: bool = False
    ) -> tuple[Message, ...]:
        if isinstance(e, _User):
            m = e.message
            if m.images:
                return (UserMessage(text=m.text, images=_filled(m.images, blobs)),)
            return (m,)
        parts = tuple(
            p for p in e.parts if not isinstance(p, ToolCallPart) or p.call_id in e.results
        )
        if not parts:
            return ()
        results = tuple(
            self._result(e.results[c], hot, blobs, whole=whole) for c in e.calls if c in e.results
        )
        if results:
            return (AssistantMessage(parts=parts), ToolResultsMessage(results=results))
        return (AssistantMessage(parts=parts),)

    def _shows_whole(self, res: _Result, hot: bool) -> bool:
        return hot and res.blob is not None and res.size <= self.policy.hot_max_bytes

    def _result(
        self, res: _Result, hot: bool, blobs: Blobs, *, whole: bool = False
    ) -> ToolResultPart:
        p = res.part
        if p.images:
            p = ToolResultPart(
                call_id=p.call_id,
                name=p.name,
                content=p.content,
                is_error=p.is_error,
                images=_filled(p.images, blobs),
            )
        if res.blob is None or not (whole or self._shows_whole(res, hot)):
            return p
        data = blobs.get(res.blob)
        if data is None:
            return p
        return ToolResultPart(
            call_id=p.call_id,
            name=p.name,
            content=data.decode("utf-8", "replace"),
            is_error=p.is_error,
            images=p.images,
        )

    @staticmethod
    def _images(refs: Iterable[ImageRef]) -> tuple[ImagePart, ...]:
        """Placeholders for the images `refs` name: their bytes are passed in when rendering
        (`hot_blobs` lists them), so the fold reads no storage."""
        return tuple(ImagePart(media_type=r.media_type, data=b"", sha256=r.sha256) for r in refs)

    def _note_images(self, entry: int, refs: Iterable[ImageRef]) -> None:
        self._image_blobs.extend((entry, r.sha256) for r in refs)

    # -- the request ------------------------------------------------------------------------------

    def head(self) -> tuple[Message, ...]:
        """What stands before the entries: the checkpoint summary, or a note of what was omitted."""
        if self.checkpoint is not None:
            return (
                UserMessage(text=self.checkpoint.text),
                *self._restated(self.checkpoint.watermark),
            )
        if self.omitted_before:
            return (
                UserMessage(
                    text=f"[Events 1–{self.omitted_before} of this session are not shown: the "
                    "history did not fit and could not be summarized. Ask the user if something "
                    "earlier matters.]"
                ),
                *self._restated(self.omitted_before),
            )
        return ()

    def _restated(self, floor: int) -> tuple[Message, ...]:
        """The project instructions of the covered history, each file's latest version, so
        that a summary never loses them."""
        from bubu.projections.instructions import restated_text

        covered = [n for seq, n in self._instructions if seq <= floor]
        text = restated_text(covered)
        return (UserMessage(text=text),) if text else ()

    def hot_blobs(self) -> list[str]:
        """The offloaded results the next request shows whole (the hot steps' small enough ones):
        read these and pass them to `messages` and `fingerprint`."""
        start = self._visible().start
        out: list[str] = [sha for i, sha in self._image_blobs if i >= start]
        if self.policy.hot_steps <= 0:
            return out
        for i in self._steps[-self.policy.hot_steps :]:
            if i >= start and self._hot[i]:
                out.extend(
                    r.blob
                    for r in self._step(i).results.values()
                    if r.blob is not None and self._shows_whole(r, True)
                )
        return out

    def span_blobs(self, after: int, upto: int) -> list[str]:
        """Every offloaded result of the entries that start in (after, upto] (for
        `span_messages`)."""
        lo, hi = bisect.bisect_right(self._seqs, after), bisect.bisect_right(self._seqs, upto)
        return [
            r.blob
            for e in self.entries[lo:hi]
            if isinstance(e, _Step)
            for r in e.results.values()
            if r.blob is not None
        ]

    def messages(self, blobs: Blobs = NO_BLOBS) -> tuple[Message, ...]:
        """The messages of the next request, every call paired with its result."""
        flat, _, _ = self._build(blobs)
        return (*self.head(), *flat)

    def fingerprint(self, blobs: Blobs = NO_BLOBS) -> tuple[str, int]:
        """A digest naming the exact messages and their canonical size in bytes.

        The digest is sha-256 over the digests of the head's messages followed by the running
        digest of the entries (sha-256 over each message's canonical digest, in order); both cost
        only what changed since the last request.
        """
        h = hashlib.sha256()
        size = 0
        for m in self.head():
            data = canonical(m)
            h.update(hashlib.sha256(data).digest())
            size += len(data)
        _, entries_size, entries = self._build(blobs)
        h.update(entries.digest())
        return h.hexdigest(), size + entries_size

    def step_sizes(
        self, blobs: Blobs = NO_BLOBS, *, include_covered: bool = False
    ) -> list[tuple[int, int]]:
        """(first seq, rendered bytes) of each visible entry (or every entry), oldest first, as the
        request renders them with `blobs` (the bytes `hot_blobs` names)."""
        idx = range(len(self.entries)) if include_covered else self._visible()
        return [(self.entries[i].first_seq, self._render_at(i, blobs).size) for i in idx]

    def span_messages(self, after: int, upto: int, blobs: Blobs = NO_BLOBS) -> tuple[Message, ...]:
        """The messages of the entries that start in (after, upto], every offloaded result whole
        (what a summarizer must see: pass the bytes `span_blobs` names), not its placeholder."""
        out: list[Message] = []
        lo, hi = bisect.bisect_right(self._seqs, after), bisect.bisect_right(self._seqs, upto)
        for e in self.entries[lo:hi]:
            out.extend(self._render(e, False, blobs, whole=True))
        return tuple(out)

    def forget_upto(self, floor: int) -> None:
        """Drop the entries that start at or below `floor`, which no request or summary will show
        again (a valid summary covers them), so that the fold holds the window, not the session.

        Only the entries go: the high water, the checkpoint and the project instructions stay.
        """
        k = bisect.bisect_right(self._seqs, floor)
        if k == 0:
            return
        for e in self.entries[:k]:
            del self._index[id(e)]
            if isinstance(e, _Step):
                for call in e.calls:
                    if self.by_call.get(call) is e:
                        del self.by_call[call]
        for key in [key for key, step in self.by_invocation.items() if step.first_seq <= floor]:
            del self.by_invocation[key]
        del self.entries[:k], self._rendered[:k], self._hot[:k], self._seqs[:k]
        self._index = {key: i - k for key, i in self._index.items()}
        self._steps = [i - k for i in self._steps if i >= k]
        self._image_blobs = [(i - k, sha) for i, sha in self._image_blobs if i >= k]
        if self._flat_start >= k:
            self._flat_start -= k
        else:
            self._flat_start, self._flat, self._cum = -1, [], []

    def set_checkpoint(self, checkpoint: Checkpoint | None) -> None:
        """Use `checkpoint` (validated, stored) for everything up to its watermark."""
        self.checkpoint = checkpoint
        if checkpoint is not None:
            self.omitted_before = 0


Inclusion = Literal["included", "placeholder", "covered", "hidden", "skipped", "omitted"]


def diagnose(records: Iterable[Record], fold: ContextFold) -> list[tuple[int, str, Inclusion, str]]:
    """For each record: (seq, kind, what the next request does with it, why)."""
    from bubu.events import kind_of

    answered: set[str] = set()
    rows: list[tuple[int, str, Inclusion, str]] = []
    records = list(records)
    for r in records:
        c = r.event.content
        if isinstance(c, FunctionResponse):
            answered.add(c.call_id)
    cold: set[str] = set()
    hot_calls: set[str] = set()
    for i in range(len(fold.entries)):
        e = fold.entries[i]
        if isinstance(e, _Step):
            (hot_calls if fold._hot[i] else cold).update(e.calls)
    floor = fold.checkpoint.watermark if fold.checkpoint else fold.omitted_before
    for r in records:
        ev, c = r.event, r.event.content
        k = kind_of(ev)
        if r.seq <= floor:
            why = (
                f"summarized by checkpoint {fold.checkpoint.key}"
                if fold.checkpoint
                else "did not fit"
            )
            rows.append((r.seq, k, "covered" if fold.checkpoint else "omitted", why))
        elif ev.visibility == "hidden" or c is None:
            rows.append(
                (r.seq, k, "hidden", "not part of the model's history (a fact for the runtime)")
            )
        elif isinstance(c, FunctionCall) and c.call_id not in answered:
            rows.append(
                (
                    r.seq,
                    k,
                    "skipped",
                    "no committed outcome yet: a call is only sent with its result",
                )
            )
        elif (
            isinstance(c, FunctionResponse)
            and c.blob is not None
            and (c.call_id in cold or c.blob.size > fold.policy.hot_max_bytes)
        ):
            rows.append(
                (
                    r.seq,
                    k,
                    "placeholder",
                    f"{c.blob.size:,} bytes offloaded; the model sees a placeholder",
                )
            )
        elif k == "error":
            rows.append((r.seq, k, "hidden", "errors are for people, not replayed to the model"))
        elif isinstance(c, Text) and not c.text:
            rows.append((r.seq, k, "skipped", "empty text"))
        else:
            rows.append((r.seq, k, "included", ""))
    return rows


def fold_context(records: Iterable[Record], start: ContextFold | None = None) -> ContextFold:
    """Fold records into `start` (mutated) or a fresh fold."""
    f = start if start is not None else ContextFold()
    for r in records:
        f.apply(r)
    return f


def _filled(images: tuple[ImagePart, ...], blobs: Blobs) -> tuple[ImagePart, ...]:
    """The images with their bytes from `blobs` (one whose blob is gone is left out)."""
    return tuple(
        ImagePart(media_type=p.media_type, data=data, sha256=p.sha256)
        for p in images
        if (data := p.data or blobs.get(p.sha256) or b"")
    )
