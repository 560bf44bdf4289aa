"""A provider's HTTP calls spoken directly over `httpx2`: a JSON POST whose answer is a stream of
server-sent events, and the errors a failed call raises.

The official SDKs build every type of their API when imported (a second and more of CPU before
the first request); this module sends the same request and reads the same documented stream, so
a run reaches the wire without them. What it raises mirrors the SDKs' own exceptions (a status
error with the parsed body and the response, a timeout and a connection error wrapping the
`httpx2` failure as their cause), so the adapters classify failures exactly as before.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx2

__all__ = ["APIConnectionError", "APIError", "APIStatusError", "APITimeoutError", "Obj", "Wire"]


class Obj(dict[str, Any]):
    """A JSON object read by attribute, as the SDKs' models are: a missing field is None, a
    nested object is an `Obj` too. It stays a dict, so `dict(obj)` and `obj.get` work; a field
    named like a dict method (`items`, `values`, `keys`, `get`, `copy`) is read as
    `obj["items"]`."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # protocols (copy, pickle) look for these: not JSON fields
            raise AttributeError(name)
        value = self.get(name)
        return Obj(value) if type(value) is dict else value

    @property
    def model_extra(self) -> dict[str, Any]:
        """Every field (the SDK models' fields outside their schema are among them)."""
        return dict(self)

    def to_dict(self, mode: str = "json") -> dict[str, Any]:
        """The object as plain JSON data (the SDK models' `to_dict`)."""
        del mode
        plain: dict[str, Any] = json.loads(json.dumps(self))
        return plain


class APIError(Exception):
    """A call failed in a way the server described (`body`), e.g. an error inside a stream."""

    def __init__(self, message: str, *, body: object) -> None:
        super().__init__(message)
        self.message = message
        self.body = body
        self.code = body.get("code") if isinstance(body, dict) else None


class APIStatusError(APIError):
    """The server answered with an error status (or an error event inside a 200 stream)."""

    def __init__(self, message: str, *, response: httpx2.Response, body: object) -> None:
        super().__init__(message, body=body)
        self.response = response
        self.status_code = response.status_code


class APIConnectionError(APIError):
    """The connection failed or broke off; the `httpx2` error is the cause."""

    def __init__(self, message: str = "Connection error.") -> None:
        super().__init__(message, body=None)


class APITimeoutError(APIConnectionError):
    """The request or the stream timed out; the `httpx2` error is the cause."""

    def __init__(self) -> None:
        super().__init__("Request timed out.")


class Event:
    """One server-sent event: its `event` name (None when unnamed) and its `data` lines."""

    __slots__ = ("data", "event")

    def __init__(self, event: str | None, data: str) -> None:
        self.event, self.data = event, data


def events(lines: Iterator[str]) -> Iterator[Event]:
    """The events of an SSE stream (the WHATWG rules: `event:`, `data:`, a blank line ends one;
    comments and other fields are skipped)."""
    name: str | None = None
    data: list[str] = []
    for line in lines:
        if not line:
            if name is not None or data:
                yield Event(name, "\n".join(data))
            name, data = None, []
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    if name is not None or data:
        yield Event(name, "\n".join(data))


_HTTPX_DEFAULT = httpx2.Timeout(5.0)
_SDK_DEFAULT = httpx2.Timeout(600.0, connect=5.0)

ErrorBody = Callable[[object], object]
"""What the SDK keeps of an error body as the error's `body` (OpenAI: its `error` member)."""


class Wire:
    """POSTs JSON to one server and streams the answer, with the headers every call carries."""

    def __init__(
        self,
        client: httpx2.Client,
        base_url: str,
        headers: Mapping[str, str],
        *,
        timeout: httpx2.Timeout | None,
        error_body: ErrorBody = lambda body: body,
    ) -> None:
        self._client = client
        self._base = base_url.rstrip("/")
        self._headers = dict(headers)
        if timeout is None:
            # As the SDKs choose: the given client's own timeouts, unless they are httpx2's
            # defaults (5 s), which no model call could live with; then ten minutes.
            timeout = client.timeout if client.timeout != _HTTPX_DEFAULT else _SDK_DEFAULT
        self._timeout = timeout
        self._error_body = error_body

    @property
    def timeout(self) -> httpx2.Timeout:
        """The timeouts every call runs under."""
        return self._timeout

    def close(self) -> None:
        """Close the HTTP client."""
        self._client.close()

    def is_closed(self) -> bool:
        """Whether the HTTP client was closed."""
        return self._client.is_closed

    def url(self, path: str) -> str:
        """The full URL of `path` at the server."""
        return f"{self._base}/{path.lstrip('/')}"

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        stream: bool,
        timeout: float | None = None,
    ) -> httpx2.Response:
        headers = dict(self._headers)
        content = None
        if body is not None:
            content = json.dumps(body, ensure_ascii=False).encode()
            headers["content-type"] = "application/json"
        request = self._client.build_request(
            method,
            self.url(path),
            headers=headers,
            content=content,
            timeout=self._timeout if timeout is None else httpx2.Timeout(timeout),
        )
        try:
            response = self._client.send(request, stream=stream)
        except httpx2.TimeoutException as err:
            raise APITimeoutError() from err
        except httpx2.TransportError as err:
            raise APIConnectionError() from err
        if not response.is_success:
            raise self._status_error(response)
        return response

    def _status_error(self, response: httpx2.Response) -> APIStatusError:
        try:
            text = response.read().decode(response.encoding or "utf-8", "replace").strip()
        except httpx2.HTTPError:
            return APIStatusError(
                f"Error code: {response.status_code}", response=response, body=None
            )
        finally:
            response.close()
        body: object = text
        try:
            body = json.loads(text)
            message = f"Error code: {response.status_code} - {body}"
        except ValueError:
            message = text or f"Error code: {response.status_code}"
        return APIStatusError(message, response=response, body=self._error_body(body))

    def status_of(self, path: str, *, timeout: float) -> int:
        """The HTTP status a GET of `path` answers (raises on a connection failure)."""
        try:
            response = self._send("GET", path, stream=False, timeout=timeout)
        except APIStatusError as exc:
            return exc.status_code
        return response.status_code

    def post(self, path: str, body: object) -> Any:
        """POST `body` and return the answer's JSON (objects as `Obj`)."""
        response = self._send("POST", path, body=body, stream=False)
        try:
            return json.loads(response.text, object_hook=Obj)
        except ValueError:
            return response.text

    def stream(self, path: str, body: object) -> Opened:
        """POST `body` now (a failure to send or an error status raises here, as the SDKs'
        `create` does) and return the open stream: entered, it yields the response with the
        events of its SSE body, a transport failure while reading raised as the SDKs raise it."""
        return Opened(self._send("POST", path, body=body, stream=True))


class Opened:
    """A sent request's streaming response; closed when the `with` block ends."""

    __slots__ = ("response",)

    def __init__(self, response: httpx2.Response) -> None:
        self.response = response

    def __enter__(self) -> tuple[httpx2.Response, Iterator[Event]]:
        return self.response, self._read()

    def __exit__(self, *_: object) -> None:
        self.response.close()

    def _read(self) -> Iterator[Event]:
        try:
            yield from events(self.response.iter_lines())
        except httpx2.TimeoutException as err:
            raise APITimeoutError() from err
        except httpx2.TransportError as err:
            raise APIConnectionError() from err


def data(event: Event) -> Any:
    """An event's data as JSON, objects as `Obj`."""
    return json.loads(event.data, object_hook=Obj)
