"""Keep secret values out of the log: every event and blob is scrubbed before it is appended.

The store calls `scrub` on whatever it is about to append (`Store.append`, `Store.create_session`),
so the canonical bytes, and the hash chain over them, only ever hold ``[redacted:NAME]`` where a
secret's value was. A value is found as it is, JSON-escaped (once or twice, with or without
``\\/`` and ``\\uXXXX`` escapes) and percent-encoded; a value transformed otherwise (base64,
reversed, split across lines) is not recognised. The secrets are those of `bubu.secrets`.

Values of a known shape are replaced too, whoever's they are (a key the model printed, a token in
a file it read): provider key prefixes, private-key blocks, the password of a URL
(`bubu.secretvalues.PATTERNS`, from detect-secrets' plugins), each by ``[redacted:KIND]``
(``[redacted:github-token]``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote, quote_plus

import msgspec

from bubu import secrets, secretvalues
from bubu.events import BlobRef, Event, FunctionResponse, Text
from bubu.log import codec

_encoder = msgspec.json.Encoder(order="sorted")


def marker(name: str) -> str:
    """What stands in the log for the value of the secret variable `name`."""
    return f"[redacted:{name}]"


def _escapes(value: str) -> set[str]:
    import json  # here: only a process that knows a secret builds its forms

    return {
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        value.replace("/", "\\/"),
        json.dumps(value)[1:-1].replace("/", "\\/"),
    }


def variants(value: str) -> list[str]:
    """The forms in which `value` is recognised, longest first."""
    forms = {value, quote(value, safe=""), quote_plus(value)}
    for _ in range(2):  # a JSON text inside a JSON string inside an event
        forms |= {e for f in list(forms) for e in _escapes(f)}
    return sorted(forms, key=len, reverse=True)


_PLAIN = re.compile(r"[A-Za-z0-9_.~-]+")
"""Characters that JSON escaping and percent-encoding leave as they are."""


def _cores(value: str) -> list[bytes]:
    runs = _PLAIN.findall(value)
    core = max(runs, key=len) if runs else ""
    if len(core) >= 6:
        return [core.encode()]
    return [_encoder.encode(f)[1:-1] for f in variants(value)]


class Redactor(msgspec.Struct, frozen=True):
    """The compiled patterns of one set of secrets."""

    version: int
    names: dict[str, str]
    """Each recognised form of a value -> the variable's name."""
    text_re: re.Pattern[str]
    bytes_re: re.Pattern[bytes]
    probes: dict[bytes, str]
    """Each form as it appears inside the canonical bytes of an event -> the variable's name."""
    cores: tuple[bytes, ...]
    """What `hits` looks for: per secret, its longest run of characters no escaping changes
    (so it is inside every form), else all its forms. One search per secret and event."""

    @classmethod
    def build(cls, found: Sequence[secrets.Secret], version: int) -> Redactor:
        """The redactor of `found` (one alternation, longest form first, so a secret that
        contains another is replaced whole)."""
        names: dict[str, str] = {}
        for s in sorted(found, key=lambda s: len(s.value), reverse=True):
            for form in variants(s.value):
                names.setdefault(form, s.name)
        forms = sorted(names, key=len, reverse=True)
        return cls(
            version=version,
            names=names,
            text_re=re.compile("|".join(map(re.escape, forms))),
            bytes_re=re.compile(b"|".join(re.escape(f.encode("utf-8", "replace")) for f in forms)),
            probes={_encoder.encode(f)[1:-1]: names[f] for f in reversed(forms)},
            cores=tuple(dict.fromkeys(c for s in found for c in _cores(s.value))),
        )

    def text(self, text: str) -> str:
        """`text` with every secret replaced by its marker."""
        return self.text_re.sub(lambda m: marker(self.names[m.group()]), text)

    def data(self, data: bytes) -> bytes:
        """`data` (a blob, any bytes) with every secret replaced by its marker."""
        return self.bytes_re.sub(
            lambda m: marker(self.names[m.group().decode("utf-8", "replace")]).encode(), data
        )

    def hits(self, payload: bytes) -> bool:
        """Whether the canonical bytes of an event may hold a secret (never a false no)."""
        return any(c in payload for c in self.cores)

    def found(self, payload: bytes) -> str | None:
        """The name of a secret the canonical bytes of an event (or a blob) hold, if any."""
        for probe, name in self.probes.items():
            if probe in payload:
                return name
        m = self.bytes_re.search(payload)
        return None if m is None else self.names[m.group().decode("utf-8", "replace")]


_cache: tuple[int, Redactor | None] = (-1, None)


def current() -> Redactor | None:
    """The redactor of this process's secrets, or None when there are none (every append asks,
    so the answer is cached until the set of secrets changes)."""
    global _cache
    version = secrets.version()
    seen, cached = _cache
    if seen != version:
        found = secrets.known()
        cached = Redactor.build(found, version) if found else None
        _cache = (version, cached)
    return cached


def text(value: str) -> str:
    """`value` with every secret, and every value of a known shape, replaced by its marker."""
    r = current()
    return secretvalues.sub(value if r is None else r.text(value))


def data(value: bytes) -> bytes:
    """Bytes (a tool's whole output, a blob) with every secret replaced by its marker; values
    of a known shape too when the bytes are text (an image is left whole)."""
    r = current()
    value = value if r is None else r.data(value)
    return _shapes(value)


def _shapes(value: bytes) -> bytes:
    if secretvalues.search(value) is None:
        return value
    try:
        decoded = value.decode("utf-8")
    except UnicodeDecodeError:
        return value
    return secretvalues.sub(decoded).encode("utf-8")


# ---- what a terminal shows while text streams ---------------------------------------------------

HOLD_MAX = 4096
"""The longest unbroken run of streamed text held back before it is shown anyway (redacted)."""
_KEY_START = "-----BEGIN"


def _ready(buf: str) -> int:
    """How much of streamed `buf` can be shown now: up to its last blank (a secret is one
    unbroken run of characters, so a run still growing may be the start of one), and nothing
    from a private-key block that has not ended."""
    k = buf.find(_KEY_START)
    if k >= 0 and "-----END" not in buf[k:]:
        header = buf[k : k + 64].split("\n", 1)
        if "PRIVATE KEY" in header[0] or (len(header) == 1 and len(header[0]) < 64):
            buf = buf[:k]  # a key block (or what may become one) waits for its END line
    cut = max(buf.rfind(" "), buf.rfind("\n"), buf.rfind("\t"))
    return cut + 1


def shown_prefix(text: str) -> str:
    """The part of a text still streaming that a terminal may show, redacted (`Stream` for a
    view that redraws the whole text each time)."""
    end = _ready(text)
    if len(text) - end > HOLD_MAX:
        end = len(text)
    return _display(text[:end])


def _display(text: str) -> str:
    r = current()
    return secretvalues.sub(text if r is None else r.text(text))


class Stream:
    """Streamed text made safe to show as it arrives: each piece comes out redacted, a run of
    characters that may be the start of a secret is held until it is complete."""

    def __init__(self) -> None:
        self._held = ""

    def feed(self, piece: str) -> str:
        """The text that can be shown now that `piece` arrived."""
        buf = self._held + piece
        end = _ready(buf)
        if len(buf) - end > HOLD_MAX:
            end = len(buf)
        self._held = buf[end:]
        return _display(buf[:end])

    def flush(self) -> str:
        """What is still held, redacted: the text ended."""
        held, self._held = self._held, ""
        return _display(held)


_FIXED = frozenset(
    {"kind", "note", "role", "author", "status", "visibility", "effect", "decision", "by", "cause"}
)
"""Fields of a closed vocabulary: left alone by the careful walk, in case a "secret" is one of
their words (a password that is ``completed`` must not make every event unreadable)."""


def found_in(events: Sequence[Event], blobs: Sequence[bytes] = ()) -> str | None:
    """The name of a secret whose value `events` or `blobs` hold, or None: a log written
    elsewhere (or before) is refused rather than silently altered on its way in."""
    r = current()
    if r is None:
        return None
    for payload in [*(codec.encode(ev) for ev in events), *blobs]:
        name = r.found(bytes(payload))
        if name is not None:
            return name
    return None


def _clean(r: Redactor | None, value: str) -> str:
    return secretvalues.sub(value if r is None else r.text(value))


def shape_in(events: Sequence[Event], blobs: Sequence[bytes] = ()) -> str | None:
    """The kind of a value of a known shape that `events` or text `blobs` hold, or None: a log
    written elsewhere that holds one would be altered on its way in, so it is refused instead."""
    for payload in (codec.encode(ev) for ev in events):
        kind = secretvalues.search(payload)
        if kind is not None:
            return kind
    for blob in blobs:
        if _shapes(bytes(blob)) != blob:
            return secretvalues.search(bytes(blob))
    return None


def _walk(r: Redactor | None, value: Any, *, careful: bool = False) -> Any:
    if isinstance(value, str):
        return _clean(r, value)
    if isinstance(value, dict):
        if careful:
            return {k: v if k in _FIXED else _walk(r, v, careful=True) for k, v in value.items()}
        return {_clean(r, k) if isinstance(k, str) else k: _walk(r, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(r, v, careful=careful) for v in value]
    return value


def _event(r: Redactor | None, ev: Event, renamed: dict[str, BlobRef]) -> tuple[Event, bytes]:
    c = ev.content
    if renamed and isinstance(c, FunctionResponse) and c.blob is not None:
        new = renamed.get(c.blob.sha256)
        if new is not None:
            # The placeholder names the blob by its hash: name the scrubbed bytes instead.
            result = c.result.replace(c.blob.sha256, new.sha256)
            c = msgspec.structs.replace(c, blob=new, result=result)
            ev = msgspec.structs.replace(ev, content=c)
    images = c.images if isinstance(c, Text | FunctionResponse) else None
    if c is not None and renamed and images and any(i.sha256 in renamed for i in images):
        # An image blob that held a secret is stored scrubbed, under its new hash.
        moved = [
            msgspec.structs.replace(i, sha256=n.sha256, size=n.size)
            if (n := renamed.get(i.sha256)) is not None
            else i
            for i in images
        ]
        ev = msgspec.structs.replace(ev, content=msgspec.structs.replace(c, images=moved))
    payload = codec.encode(ev)
    if not (r is not None and r.hits(payload)) and secretvalues.search(payload) is None:
        return ev, payload
    raw = msgspec.to_builtins(ev)
    try:
        clean = msgspec.convert(_walk(r, raw), Event)
    except msgspec.ValidationError:
        clean = msgspec.convert(_walk(r, raw, careful=True), Event)
    return clean, codec.encode(clean)


def _lines(data: bytes) -> int:
    return data.count(b"\n") + (0 if not data or data.endswith(b"\n") else 1)


def scrub(events: Sequence[Event], blobs: Sequence[bytes] = ()) -> tuple[list[Event], list[bytes]]:
    """The events and blobs of one append with every secret value replaced by its marker; a
    scrubbed blob is stored under its new hash, and the events that refer to it say so."""
    clean, scrubbed, _ = scrub_encoded(events, blobs)
    return clean, scrubbed


def scrub_encoded(
    events: Sequence[Event], blobs: Sequence[bytes] = ()
) -> tuple[list[Event], list[bytes], list[bytes]]:
    """`scrub`, with the canonical bytes of each scrubbed event (`codec.encode`): the search
    encodes every event anyway, so the store hashes and stores those bytes instead of encoding
    the event a second time."""
    r = current()
    renamed: dict[str, BlobRef] = {}
    clean: list[bytes] = []
    for blob in blobs:
        scrubbed = _shapes(bytes(blob) if r is None else r.data(bytes(blob)))
        if scrubbed != blob:
            renamed[codec.sha256_hex(bytes(blob))] = BlobRef(
                sha256=codec.sha256_hex(scrubbed), size=len(scrubbed), lines=_lines(scrubbed)
            )
        clean.append(scrubbed)
    done = [_event(r, ev, renamed) for ev in events]
    return [ev for ev, _ in done], clean, [payload for _, payload in done]


__all__ = [
    "Redactor",
    "Stream",
    "current",
    "data",
    "found_in",
    "marker",
    "scrub",
    "scrub_encoded",
    "shape_in",
    "shown_prefix",
    "text",
    "variants",
]
