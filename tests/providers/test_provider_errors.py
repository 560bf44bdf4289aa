"""Error classification, Retry-After parsing and secret scrubbing shared by the adapters."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx2
import pytest

from bubu.errors import ConfigError
from bubu.providers._retry import (
    BODY_LIMIT,
    DEFAULT_STALL_S,
    STALL_ENV,
    Vendor,
    connection_error,
    display_url,
    retry_after,
    scrub,
    sdk_timeout,
    stall_timeout,
    status_error,
    timeout_error,
)

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
VENDOR = Vendor(name="OpenAI", key_env="OPENAI_API_KEY", secrets=("hunter2-long-secret",))


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "12"}, 12.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"Retry-After": "Wed, 01 Jan 2025 12:00:30 GMT"}, 30.0),
        ({"Retry-After": "Tue, 31 Dec 2024 12:00:00 GMT"}, 0.0),
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "-3"}, None),
        ({"retry-after-ms": "nan", "Retry-After": "4"}, 4.0),
        ({}, None),
    ],
)
def test_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert retry_after(headers, now=NOW) == expected


def test_scrub_removes_known_secrets_and_key_shaped_tokens() -> None:
    text = "key hunter2-long-secret and sk-proj-AbC123xyz_**** and sk-ant-api03-zzzzzzzz end"
    assert scrub(text, VENDOR.secrets) == "key *** and sk-*** and sk-*** end"
    assert scrub("x" * (BODY_LIMIT + 10), ()) == "x" * BODY_LIMIT + "…"
    # A placeholder key must not shred ordinary text.
    assert scrub("not-needed here", ("not-needed"[:3],)) == "not-needed here"


def test_display_url_drops_credentials_and_query() -> None:
    assert (
        display_url("https://me:pw@proxy.example:8443/v1?key=abc")
        == "https://proxy.example:8443/v1"
    )
    assert display_url("http://127.0.0.1:11434/v1") == "http://127.0.0.1:11434/v1"


@pytest.mark.parametrize(
    ("status", "message", "error_class", "retryable"),
    [
        (400, "bad field", "bad_request", False),
        (402, "billing", "bad_request", False),
        (413, "request too large", "context_length", False),
        (422, "unprocessable", "bad_request", False),
        (502, "bad gateway", "server_error", True),
        (504, "gateway timeout", "server_error", True),
    ],
)
def test_status_classes(status: int, message: str, error_class: str, retryable: bool) -> None:
    error = status_error(VENDOR, status, body={"message": message}, api_message=message)
    assert (error.error_class, error.retryable, error.status) == (error_class, retryable, status)
    assert message in str(error)


def test_retry_after_is_only_given_for_retryable_errors() -> None:
    headers = {"retry-after": "5"}
    assert status_error(VENDOR, 503, headers=headers).retry_after == 5.0
    assert status_error(VENDOR, 400, headers=headers).retry_after is None


def test_messages_are_one_sentence_without_secrets() -> None:
    leaky = "upstream said hunter2-long-secret is wrong"
    errors = [
        status_error(VENDOR, 400, body=leaky, api_message=leaky),
        status_error(VENDOR, 500, body={"error": leaky}, api_message=leaky),
        connection_error(VENDOR, leaky, during_stream=False),
        connection_error(VENDOR, leaky, during_stream=True),
    ]
    for error in errors:
        text = str(error)
        assert "hunter2-long-secret" not in text
        assert "hunter2-long-secret" not in (error.body or "")
        assert "\n" not in text
        assert text.count("; ") == 1


# -- the stall timeout ----------------------------------------------------------------------------


def test_the_stall_timeout_comes_from_the_flag_then_the_environment_then_the_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(STALL_ENV, raising=False)
    assert stall_timeout(None, client_given=False) == DEFAULT_STALL_S
    assert stall_timeout(None, client_given=True) is None  # the caller's client decides
    assert stall_timeout(45, client_given=True) == 45
    monkeypatch.setenv(STALL_ENV, "90")
    assert stall_timeout(None, client_given=False) == 90
    assert stall_timeout(None, client_given=True) == 90
    assert stall_timeout(30, client_given=False) == 30


@pytest.mark.parametrize(
    ("explicit", "env", "message"),
    [
        (None, "soon", "BUBU_STALL_TIMEOUT must be a number of seconds (got 'soon')"),
        (None, "0", "BUBU_STALL_TIMEOUT must be a number of seconds above 0 (got 0)"),
        (None, "-5", "BUBU_STALL_TIMEOUT must be a number of seconds above 0 (got -5)"),
        (None, "nan", "BUBU_STALL_TIMEOUT must be a number of seconds above 0 (got nan)"),
        (0.0, "", "--stall-timeout must be a number of seconds above 0 (got 0)"),
    ],
)
def test_a_bad_stall_timeout_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, explicit: float | None, env: str, message: str
) -> None:
    monkeypatch.setenv(STALL_ENV, env)
    with pytest.raises(ConfigError) as caught:
        stall_timeout(explicit, client_given=False)
    assert str(caught.value).startswith(message)


def test_a_stall_and_a_slow_connect_are_named_with_their_limits() -> None:
    request = httpx2.Request("POST", "http://127.0.0.1/v1")
    timed = Vendor(name="OpenAI", key_env="OPENAI_API_KEY", stall_s=45)
    read = timeout_error(timed, _wrapped(httpx2.ReadTimeout("timed out", request=request)))
    assert str(read) == (
        "OpenAI sent nothing for 45 s, so the request timed out (the stall timeout: "
        "--stall-timeout or BUBU_STALL_TIMEOUT); check the network and try again"
    )
    connect = timeout_error(timed, _wrapped(httpx2.ConnectTimeout("timed out", request=request)))
    assert (
        str(connect) == "could not connect to OpenAI within 10 s; check the network and try again"
    )
    assert (read.retryable, connect.retryable) == (True, True)
    assert str(timeout_error(VENDOR, None)) == (
        "the request to OpenAI timed out; check the network and try again"
    )
    assert sdk_timeout(3.0) == httpx2.Timeout(3.0, connect=3.0)
    assert sdk_timeout(120.0) == httpx2.Timeout(120.0, connect=10.0)


def _wrapped(inner: Exception) -> Exception:
    """`inner` as the cause of an SDK-level error, the way the SDKs raise it."""
    try:
        try:
            raise inner
        except Exception as e:
            raise RuntimeError("Request timed out.") from e
    except RuntimeError as outer:
        return outer
