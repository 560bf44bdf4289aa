"""Turn provider failures into `ProviderError`s the engine can act on, without leaking secrets.

Pure functions shared by the OpenAI and Anthropic adapters: classify an HTTP status (or an error
event inside a stream) as retryable or not, read `Retry-After` / `retry-after-ms`, and scrub API
keys out of everything that ends up in an error, because errors are written to the log.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Literal, Protocol, TypeAlias, TypeVar
from urllib.parse import urlsplit, urlunsplit

import httpx2

from bubu.errors import ConfigError, ProviderError
from bubu.messages import ModelResponse
from bubu.providers.windows import window_in_error

ErrorClass: TypeAlias = Literal[
    "auth",
    "bad_request",
    "bad_response",
    "connection",
    "context_length",
    "empty_stream",
    "not_found",
    "overloaded",
    "quota",
    "rate_limited",
    "server_error",
    "stream_incomplete",
    "timeout",
]

BODY_LIMIT = 2000
_MESSAGE_LIMIT = 300
_RETRYABLE_4XX = frozenset({408, 409, 425, 429})
# Key-shaped tokens (OpenAI `sk-…`, `sk-proj-…`, Anthropic `sk-ant-…`), including the partly
# masked echoes some servers put in their 401 bodies.
_KEY_PATTERN = re.compile(r"sk-[A-Za-z0-9_\-*.]{6,}")
_CONTEXT_HINTS = (
    "context_length_exceeded",
    "context length",
    "context window",
    "prompt is too long",
    "maximum context",
    "too many tokens",
    # llama-server: 400 exceed_context_size_error, "exceeds the available context size"
    "exceed_context_size",
    "available context size",
    # llama-cpp-python: "Requested tokens (N) exceed context window of M"
    "exceed context window",
)

# A proxy (LiteLLM, OpenRouter) relays its backend's failure to connect as a 500: an outage
# that the next minutes may end, whatever the words' repetition says.
_OUTAGE_HINTS = (
    "connection error",
    "connecterror",
    "connectionerror",
    "connection refused",
    "econnrefused",
    "connect timeout",
    "failed to establish",
    "cannot connect",
    "could not connect",
    "upstream",
    "name or service not known",
    "no healthy",
    "service unavailable",
)
PROBE_S = 2.0
"""Seconds a probe of the server (does it answer another request?) may take."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Vendor:
    """Who a provider talks to, as named in messages, and the secrets to keep out of them.

    `stall_s` is the stall timeout the calls run under, when Bubu set one (None: the HTTP
    client's own)."""

    name: str
    key_env: str
    secrets: tuple[str, ...] = ()
    stall_s: float | None = None
    official: bool = False
    """Calls go to the vendor's own API (whose 500s are outages, never a broken request)."""


STALL_ENV = "BUBU_STALL_TIMEOUT"
DEFAULT_STALL_S = 600.0
"""Seconds without a byte from the server before a model call is abandoned and retried."""
CONNECT_S = 10.0
"""Seconds to wait for a connection."""


def stall_timeout(explicit: float | None, *, client_given: bool) -> float | None:
    """The stall timeout a provider runs with: `explicit` (``--stall-timeout``), else
    BUBU_STALL_TIMEOUT, else the default — or None when the caller's own HTTP client decides."""
    value, source = explicit, "--stall-timeout"
    if value is None and os.environ.get(STALL_ENV, "").strip():
        raw, source = os.environ[STALL_ENV], STALL_ENV
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(
                f"{STALL_ENV} must be a number of seconds (got {raw!r}); e.g. {STALL_ENV}=120"
            ) from None
    if value is None:
        return None if client_given else DEFAULT_STALL_S
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{source} must be a number of seconds above 0 (got {value:g})")
    return value


def sdk_timeout(stall: float) -> httpx2.Timeout:
    """The HTTP timeouts for a stall timeout: any read, write or pool wait, and the connect."""
    return httpx2.Timeout(stall, connect=min(CONNECT_S, stall))


def display_url(url: str) -> str:
    """A URL safe to show: user info (which may hold a password) and query are dropped."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def scrub(text: str, secrets: Iterable[str], *, limit: int = BODY_LIMIT) -> str:
    """`text` with every secret and key-shaped token replaced by `***`, cut to `limit` chars."""
    for secret in secrets:
        # Very short "secrets" (placeholders such as "x") would shred ordinary words.
        if len(secret) >= 8:
            text = text.replace(secret, "***")
    text = _KEY_PATTERN.sub("sk-***", text)
    if len(text) > limit:
        text = text[:limit] + "…"
    return text


def body_text(body: object) -> str | None:
    """The error body the SDK parsed (JSON or text), rendered as text."""
    if body is None:
        return None
    if isinstance(body, str):
        return body
    return json.dumps(body, ensure_ascii=False, sort_keys=True, default=str)


def cause(exc: BaseException) -> str:
    """What went wrong underneath an SDK error, e.g. ``ConnectError: [Errno 111] …``."""
    inner = exc.__cause__ or exc
    return f"{type(inner).__name__}: {inner}" if str(inner) else type(inner).__name__


def retry_after(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """Seconds to wait as the server asks: `retry-after-ms`, else `Retry-After` (secs or a date)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = _number(lowered.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000.0
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    seconds = _number(raw)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(raw.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def _number(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def status_error(
    vendor: Vendor,
    status: int,
    *,
    body: object = None,
    headers: Mapping[str, str] | None = None,
    api_message: str | None = None,
    api_code: str | None = None,
) -> ProviderError:
    """The `ProviderError` for an HTTP error status (or a stream error event given a status)."""
    text = body_text(body)
    scrubbed_body = scrub(text, vendor.secrets) if text is not None else None
    detail = scrub(api_message or "", vendor.secrets, limit=_MESSAGE_LIMIT)
    hint = f"{status}: {detail}" if detail else str(status)
    haystack = f"{api_code or ''} {api_message or ''} {text or ''}".lower()
    wait = retry_after(headers) if headers is not None else None
    error_class: ErrorClass
    if status in (401, 403):
        error_class = "auth"
        # The provider's own words say which key or permission is wrong.
        message = f"the API key was rejected by {vendor.name} ({hint}); check {vendor.key_env}"
    elif status == 429 and "insufficient_quota" in haystack:
        error_class = "quota"
        message = f"{vendor.name} says the account is out of quota ({hint}); check plan and billing"
    elif status == 429:
        error_class = "rate_limited"
        message = f"{vendor.name} rate-limited the request (429); wait a moment and try again"
    elif status == 529:
        error_class = "overloaded"
        message = f"{vendor.name} is overloaded (529); try again in a few minutes"
    elif status == 408:
        error_class = "timeout"
        message = f"{vendor.name} timed out waiting for the request (408); try again"
    elif status >= 500 or status in (409, 425):
        error_class = "server_error"
        message = f"{vendor.name} returned a server error ({hint}); try again later"
    elif status == 413 or any(h in haystack for h in _CONTEXT_HINTS):
        error_class = "context_length"
        message = (
            f"the request does not fit the model's context window ({hint}); "
            "compact the session or start a new one"
        )
    elif status == 404:
        error_class = "not_found"
        message = (
            f"{vendor.name} does not know that model or endpoint ({hint}); check the model name"
        )
    else:
        error_class = "bad_request"
        message = f"{vendor.name} rejected the request ({hint}); check the model name and options"
    retryable = status in _RETRYABLE_4XX or status >= 500
    if error_class == "quota":
        retryable = False
    error = ProviderError(
        message,
        status=status,
        body=scrubbed_body,
        retryable=retryable,
        retry_after=wait if retryable else None,
        error_class=error_class,
    )
    if error_class == "context_length":
        error.served_window = window_in_error(body) or window_in_error(api_message)
    # A compatible server's 500 is mostly its handler failing on this request (llama-cpp-python's
    # schema errors) -- unless its words say it could not reach its own backend.
    error.repeats_for_the_request = (
        not vendor.official and status == 500 and not any(h in haystack for h in _OUTAGE_HINTS)
    )
    return error


def probe_server(error: ProviderError, probe: Callable[[], int]) -> ProviderError:
    """Mark `error` `server_up` when it may be about the request and the server answers another
    request (`probe` returns that answer's HTTP status; below 500 means it is up)."""
    if error.repeats_for_the_request:
        try:
            error.server_up = probe() < 500
        except Exception:  # a probe that fails says only that the server is not shown up
            error.server_up = False
    return error


def timeout_error(vendor: Vendor, exc: BaseException | None = None) -> ProviderError:
    """The request or the stream timed out; worth another attempt."""
    connecting = False
    while exc is not None:
        connecting = connecting or isinstance(exc, httpx2.ConnectTimeout)
        exc = exc.__cause__ or exc.__context__
    if vendor.stall_s is None:
        what = f"the request to {vendor.name} timed out"
    elif connecting:
        what = f"could not connect to {vendor.name} within {min(CONNECT_S, vendor.stall_s):g} s"
    else:
        what = (
            f"{vendor.name} sent nothing for {vendor.stall_s:g} s, so the request timed out "
            f"(the stall timeout: --stall-timeout or {STALL_ENV})"
        )
    return ProviderError(
        f"{what}; check the network and try again", retryable=True, error_class="timeout"
    )


def connection_error(vendor: Vendor, detail: str, *, during_stream: bool) -> ProviderError:
    """The connection failed or broke off; worth another attempt."""
    detail = scrub(detail, vendor.secrets, limit=_MESSAGE_LIMIT)
    if during_stream:
        what = f"the connection to {vendor.name} broke off while the response was streaming"
        return ProviderError(
            f"{what} ({detail}); try again",
            body=detail,
            retryable=True,
            error_class="stream_incomplete",
        )
    return ProviderError(
        f"could not connect to {vendor.name} ({detail}); check the network and the base URL",
        body=detail,
        retryable=True,
        error_class="connection",
    )


EMPTY_STREAM_CAUSES = (
    "the request exceeds its context window, it cannot stream what was asked (llama-cpp-python's "
    "server cannot stream an automatic choice of tools), or it failed in the middle of the "
    "request; the server's log says which"
)
"""What makes a server answer 200 with an empty stream, which the answer itself cannot tell apart
(worded so that toolmode.py does not read a refusal of tools into it)."""

_CAUSES_SAID: tuple[tuple[tuple[str, ...], str], ...] = (
    (
        ("context window", "context length", "context size", "exceed"),
        "the request does not fit its context window",
    ),
    (("tool choice", "tool_choice", "function call"), "it cannot stream the choice of tools asked"),
)
"""Words of a server's own error, and the cause of the empty stream they name."""


def empty_stream_error(vendor: Vendor, said: ProviderError | None = None) -> ProviderError:
    """A 200 whose stream closed with nothing in it: no chunk, no end. The likely causes are
    named; `said` is the server's error when asked again without streaming, quoted, with the
    cause it names when it names one."""
    what = f"{vendor.name} closed the response stream without sending anything"
    if said is None:
        message = f"{what}; a server does this when {EMPTY_STREAM_CAUSES}"
    else:
        text = scrub(str(said), vendor.secrets, limit=_MESSAGE_LIMIT)
        lowered = text.lower()
        cause = next((c for words, c in _CAUSES_SAID if any(w in lowered for w in words)), None)
        because = f": {cause}" if cause else f"; a server does this when {EMPTY_STREAM_CAUSES}"
        message = f"{what}, and asked again without streaming it failed ({text}){because}"
    return ProviderError(message, retryable=True, error_class="empty_stream")


def incomplete_stream_error(vendor: Vendor) -> ProviderError:
    """The stream ended cleanly but before the response said it was complete."""
    return ProviderError(
        f"the response stream from {vendor.name} ended before the response was complete; try again",
        retryable=True,
        error_class="stream_incomplete",
    )


def bad_response_error(vendor: Vendor, detail: str) -> ProviderError:
    """The server sent something that is not the documented wire format."""
    detail = scrub(detail, vendor.secrets, limit=_MESSAGE_LIMIT)
    return ProviderError(
        f"{vendor.name} sent a response Bubu could not read ({detail}); try again",
        body=detail,
        retryable=True,
        error_class="bad_response",
    )


T = TypeVar("T")
Stream: TypeAlias = AbstractContextManager[Iterable[T]]


class Assembler(Protocol):
    """Builds a response from a provider's stream items."""

    @property
    def complete(self) -> bool:
        """Whether the stream said the response ended."""
        ...

    def result(self) -> ModelResponse:
        """The assembled response."""
        ...


def stream_call(
    vendor: Vendor,
    *,
    open_stream: Callable[[], Stream[T]],
    feed: Callable[[T], None],
    assembler: Assembler,
    errors: tuple[type[Exception], ...],
    convert: Callable[[Exception, bool], ProviderError],
) -> ModelResponse:
    """Open a stream, feed each item, and return the response; every failure is a ProviderError.

    The error is raised outside the handler, so no SDK exception (whose request holds the API
    key) rides along as its __context__.
    """
    streaming = False
    fed = False
    error: ProviderError
    try:
        stream = open_stream()
        streaming = True
        with stream as items:
            for item in items:
                fed = True
                feed(item)
        if assembler.complete:
            return assembler.result()
        error = incomplete_stream_error(vendor) if fed else empty_stream_error(vendor)
    except errors as exc:
        error = convert(exc, streaming)
    raise error
