"""The one canonical encoding of events, the hash chain, and upgrade-on-read.

Canonical bytes: JSON, keys sorted, no insignificant whitespace, UTF-8, fields equal to their
default omitted, finite numbers only. The chain digest of an event is computed over these bytes, so
they must never change for an event already written: any change to the vocabulary that would
change them is a new schema version with an upgrader below.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable
from typing import Any, get_args

import msgspec

from bubu.errors import BubuError, CorruptLog, NewerLogError
from bubu.events import SCHEMA_VERSION, Content, Event, FunctionCall, FunctionResponse

GENESIS = bytes(32)
"""The hash before the first event of every session."""


class InvalidEvent(BubuError):
    """An event cannot be encoded canonically (a NaN, a lone surrogate …)."""


_encoder = msgspec.json.Encoder(order="sorted")
_decoder = msgspec.json.Decoder(Event)
_generic = msgspec.json.Decoder()
_KINDS = frozenset(str(c.__struct_config__.tag) for c in get_args(Content))

# Upgraders: UPGRADERS[v] turns a decoded version-v event (a plain dict) into version v+1.
Upgrader = Callable[[dict[str, Any]], dict[str, Any]]
UPGRADERS: dict[int, Upgrader] = {}


def _check_json(value: object, where: str) -> None:
    """Refuse what canonical JSON cannot carry losslessly: non-finite numbers, non-string keys.

    Every appended tool call passes through here, so the walk is a loop over a stack with exact
    type tests first (the common str/int values cost one comparison each)."""
    stack = [value]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is str or t is int or t is bool or v is None:
            continue
        if t is dict or isinstance(v, dict):
            assert isinstance(v, dict)
            for k, item in v.items():
                if not isinstance(k, str):
                    raise InvalidEvent(f"{where} has a non-string key {k!r}")
                stack.append(item)
        elif t is list or t is tuple or isinstance(v, list | tuple):
            assert isinstance(v, list | tuple)
            stack.extend(v)
        elif isinstance(v, float) and not math.isfinite(v):
            raise InvalidEvent(f"{where} holds a non-finite number ({v}); JSON cannot carry it")


def encode(event: Event) -> bytes:
    """The canonical bytes of `event`; raises InvalidEvent when it cannot be encoded losslessly."""
    if event.v != SCHEMA_VERSION:
        # Decoding upgrades every older event, so only a forged or foreign event gets here.
        raise InvalidEvent(
            f"an event of schema {event.v} cannot be written by this Bubu (schema {SCHEMA_VERSION})"
        )
    # The free-form JSON fields: tool-call arguments, a provider-native result, a state delta.
    c = event.content
    if type(c) is FunctionCall:
        if c.arguments:
            _check_json(c.arguments, "tool-call arguments")
    elif type(c) is FunctionResponse and c.native is not None:
        _check_json(c.native, "a provider-native result")
    if event.actions is not None and event.actions.state_delta:
        _check_json(event.actions.state_delta, "a state delta")
    try:
        return _encoder.encode(event)
    except UnicodeEncodeError as e:
        raise InvalidEvent(
            "the event holds text that is not valid Unicode (a lone surrogate); "
            "sanitize it with bubu.log.codec.sanitize_text before appending"
        ) from e


def canonical_json(value: object) -> bytes:
    """Canonical bytes of any JSON value (used for argument and request digests)."""
    _check_json(value, "the value")
    try:
        return _encoder.encode(value)
    except UnicodeEncodeError as e:
        raise InvalidEvent("the value holds a lone surrogate; it is not valid Unicode") from e


_SURROGATE = re.compile("[\ud800-\udfff]")


def sanitize_text(text: str) -> str:
    """Replace lone surrogates (which UTF-8 cannot carry) with U+FFFD, one for one."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def sha256_hex(data: bytes) -> str:
    """Hex sha-256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def chain(prev: bytes, payload: bytes) -> bytes:
    """The next link of the hash chain: H(prev ‖ payload)."""
    return hashlib.sha256(prev + payload).digest()


def decode(payload: bytes | memoryview, *, seq: int | None = None) -> Event:
    """Decode stored bytes into an Event, upgrading older versions; refuse newer ones."""
    where = f" at seq {seq}" if seq is not None else ""
    try:
        event = _decoder.decode(payload)
    except (msgspec.DecodeError, RecursionError) as e:
        return _decode_slow(payload, where, e)
    if event.v != SCHEMA_VERSION:
        return _decode_slow(payload, where, None)
    return event


def _decode_slow(payload: bytes | memoryview, where: str, cause: Exception | None) -> Event:
    try:
        raw = _generic.decode(payload)
    except msgspec.DecodeError as e:
        raise CorruptLog(f"the event{where} is not valid JSON ({e}); the log is damaged") from e
    except RecursionError as e:  # nesting deeper than any event has: damage, or a hostile file
        raise CorruptLog(
            f"the event{where} is nested too deeply to be an event; the log is damaged"
        ) from e
    if not isinstance(raw, dict) or not isinstance(raw.get("v"), int):
        raise CorruptLog(f"the event{where} has no schema version; the log is damaged")
    version: int = raw["v"]
    if version > SCHEMA_VERSION:
        raise NewerLogError(
            f"the event{where} was written by a newer Bubu (schema {version}, this Bubu reads "
            f"up to {SCHEMA_VERSION}); upgrade Bubu to read this log"
        )
    while version < SCHEMA_VERSION:
        upgrade = UPGRADERS.get(version)
        if upgrade is None:
            raise CorruptLog(f"the event{where} has schema {version}, which no Bubu ever wrote")
        raw = upgrade(raw)
        version += 1
        raw["v"] = version
    try:
        return msgspec.convert(raw, Event)
    except msgspec.ValidationError as e:
        kind = raw.get("content", {}).get("kind") if isinstance(raw.get("content"), dict) else None
        # Only a tag this Bubu does not know is an unknown kind; a known one failed on a field.
        detail = (
            f"unknown event kind {kind!r}"
            if isinstance(kind, str) and kind and kind not in _KINDS
            else str(e)
        )
        raise CorruptLog(f"the event{where} cannot be read: {detail}") from e


def args_digest(arguments: object) -> str:
    """The digest that names a tool call's arguments."""
    return sha256_hex(canonical_json(arguments))
