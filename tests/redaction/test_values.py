"""Secrets by value: variables whose names are new to the rule, values that look like a secret
whatever their name, in the environment of a real command, in the log and on the screen."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bubu import secrets, secretvalues
from bubu.cli.render import TerminalObserver
from bubu.log import redact
from bubu.providers.base import Delta
from engine.cli import bubu_cmd, bubu_env, only_session
from engine.helpers import call, write_script

GITHUB = "ghp_" + "Zq81mW0pLx3vTe5uRk7y" * 2 + "Ab9Q"
AWS = "AKIAQX4T7NBV2M5K8PLE"
ANTHROPIC = "sk-ant-api03-" + "Qm7x_Rt2Lp9Vz4Kw8Ny3Hc6Bd1Fg5Js0Ae" * 2
KEY_BLOCK = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "-----END OPENSSH PRIVATE KEY-----"
)
URL = "postgres://app:Vq8rT2xLm4Kp@db.internal:5432/prod"
RANDOM = base64.b64encode(bytes(range(7, 250, 8))).decode()  # 32 bytes that read as no text


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    secrets.reset({})
    yield
    secrets.reset()


@pytest.mark.parametrize(
    "name",
    [
        *("DB_PASS", "SENTRY_DSN", "GITHUB_PAT", "SLACK_WEBHOOK_URL", "PRIVATE_KEY_PEM"),
        *("SMTP_PASSWD", "GOOGLE_APPLICATION_CREDENTIALS", "APP_CREDS", "DISCORD_WEBHOOK"),
        *("DATABASE_DSN", "TLS_KEY_PEM", "DB_PWD", "SESSION_COOKIE", "deploy-token"),
        *("STRIPE_SECRET", "SECRETKEY", "APPSECRET", "SSHPASS", "TWILIO_AUTH", "BASIC_AUTH"),
        *("API_BEARER", "SESSION_JWT", "RSYNC_PASSWORD"),
    ],
)
def test_the_name_rule_catches_these_names(name: str) -> None:
    assert secrets.is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "PATH",
        "PWD",
        "OLDPWD",
        "MAX_TOKENS",
        "PATCH_LEVEL",
        "COMPASS_HOME",
        "PASSAGE",
        "SPATH",
        "XDG_SESSION_ID",
        "PEMBROKE",
        "DSNAME",
        "WEBROOT",
        "AUTH_URL",
        "OAUTH_DOMAIN",
        "AUTHOR",
    ],
)
def test_the_name_rule_leaves_these_alone(name: str) -> None:
    assert not secrets.is_secret_name(name)


SECRET_VALUES = [
    GITHUB,
    AWS,
    ANTHROPIC,
    KEY_BLOCK,
    URL,
    RANDOM,
    "xoxb-1234567890-0987654321-abc",
    "redis://:Vq8rT2xLm4Kp@cache.internal:6379/0",
]
ORDINARY_VALUES = [
    "3f2a9c1e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39",  # a git SHA
    hashlib.sha256(b"x").hexdigest(),
    str(uuid.UUID(int=0x1234567890ABCDEF1234567890ABCDEF)),
    "/usr/local/lib/python3.11/site-packages",
    base64.b64encode(b"hello world, this is ordinary data").decode(),
    base64.b64encode(b"{'a': 1}").decode(),
    "en_US.UTF-8",
    "xterm-256color",
    "unix:path=/run/user/1000/bus",
    "rs=0:di=01;34:ln=01;36:mi=00:pi=40;33",
    "ThisIsACamelCaseIdentifierName2",
    "https://github.com/owner/repo.git",
    "postgresql://localhost:5432/test",
    "1700000000000",
    "refs/heads/feature/add-thing-123",
    "--color=always --max-count=3",
]


@pytest.mark.parametrize("value", SECRET_VALUES)
def test_a_secret_is_recognised_by_its_value(value: str) -> None:
    assert secretvalues.looks_secret(value) is not None


@pytest.mark.parametrize("value", ORDINARY_VALUES)
def test_an_ordinary_value_is_not_a_secret(value: str) -> None:
    assert secretvalues.looks_secret(value) is None
    assert redact.text(value) == value


def test_a_command_does_not_get_a_variable_whose_value_looks_secret(tmp_path: Path) -> None:
    """A real subprocess, given `command_env`: the variable named like nothing in particular is
    withheld for its value, kept when passed by name, and its value is redacted from then on."""
    environ = {"PATH": os.environ["PATH"], "DEPLOY": GITHUB, "NOTE": "hello", "SHA": "ab" * 20}
    env = secrets.command_env(environ=environ)
    seen = subprocess.run(
        [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    got = json.loads(seen)
    assert "DEPLOY" not in got
    assert got["NOTE"] == "hello"
    assert got["SHA"] == "ab" * 20
    assert secrets.command_env(["DEPLOY"], environ=environ)["DEPLOY"] == GITHUB
    assert redact.text(f"echo {GITHUB}") == "echo [redacted:DEPLOY]"


@pytest.mark.parametrize(
    ("value", "marker"),
    [
        (GITHUB, "[redacted:github-token]"),
        (AWS, "[redacted:aws-access-key]"),
        (ANTHROPIC, "[redacted:anthropic-key]"),
        (KEY_BLOCK, "[redacted:private-key]"),
    ],
)
def test_what_is_stored_holds_no_value_of_a_known_shape(value: str, marker: str) -> None:
    text = f"the model printed {value} here"
    assert redact.text(text) == f"the model printed {marker} here"
    assert redact.data(text.encode()) == f"the model printed {marker} here".encode()


def test_a_url_keeps_all_but_its_password() -> None:
    assert redact.text(URL) == "postgres://app:[redacted:url-password]@db.internal:5432/prod"
    # A password with no user name (Redis, some proxies) is a password all the same.
    assert (
        redact.text("redis://:Vq8rT2xLm4Kp@cache:6379/0")
        == "redis://:[redacted:url-password]@cache:6379/0"
    )


def test_a_binary_blob_is_left_whole() -> None:
    png = b"\x89PNG\r\n\x1a\n\xff\xfe" + AWS.encode()
    assert redact.data(png) == png


def test_the_store_patterns_still_match_what_detect_secrets_finds() -> None:
    """Each pattern copied from detect-secrets' plugins finds what the installed plugin finds:
    a sample per plugin, judged by the plugin itself and by the store's patterns."""
    from detect_secrets.plugins.aws import AWSKeyDetector
    from detect_secrets.plugins.basic_auth import BasicAuthDetector
    from detect_secrets.plugins.github_token import GitHubTokenDetector
    from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
    from detect_secrets.plugins.jwt import JwtTokenDetector
    from detect_secrets.plugins.private_key import PrivateKeyDetector
    from detect_secrets.plugins.sendgrid import SendGridDetector
    from detect_secrets.plugins.slack import SlackDetector
    from detect_secrets.plugins.stripe import StripeDetector

    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJlX2hlcmU"
    samples = [
        (AWSKeyDetector(), AWS),
        (BasicAuthDetector(), URL),
        (GitHubTokenDetector(), GITHUB),
        (GitLabTokenDetector(), "glpat-" + "a1B2c3D4e5" * 2),
        (JwtTokenDetector(), jwt),
        (PrivateKeyDetector(), KEY_BLOCK),
        (SendGridDetector(), "SG." + "a" * 22 + "." + "b" * 43),
        (SlackDetector(), "xoxb-1234567890-0987654321-abc"),
        (SlackDetector(), "https://hooks.slack.com/services/T0001/B0001/abcdefGHIJKL123"),
        (StripeDetector(), "sk_live_" + "a1B2c3D4e5f6" * 2),
    ]
    for plugin, sample in samples:
        assert list(plugin.analyze_string(sample)), (type(plugin).__name__, sample)
        assert secretvalues.find(sample) is not None, (type(plugin).__name__, sample)


def _leading_literal(regex: str) -> str:
    """What the regex engine's own parser says every match of `regex` starts with."""
    from re import _parser  # type: ignore[attr-defined]

    out = []
    for op, arg in _parser.parse(regex):
        if str(op) != "LITERAL":
            break
        out.append(chr(arg))
    return "".join(out)


@pytest.mark.parametrize("pattern", secretvalues.PATTERNS, ids=lambda p: p.kind)
def test_each_pattern_runs_only_where_its_leading_literal_is(pattern: secretvalues.Pattern) -> None:
    """The literal that lets a search skip a pattern is one every match starts with: what the
    regex engine's parser reads as the pattern's leading literal characters (or the start of it)."""
    lit = secretvalues.needle(pattern)
    assert _leading_literal(pattern.regex).startswith(lit)
    assert lit, pattern.kind  # every pattern has one today: none is searched everywhere


def test_a_literal_is_not_taken_past_a_quantifier_or_an_alternation() -> None:
    def n(regex: str, **kw: bool) -> str:
        return secretvalues.needle(secretvalues.Pattern(kind="k", regex=regex, source="", **kw))

    assert n(r"abc?d") == "ab"
    assert n(r"ab*") == "a"
    assert n(r"ab{2}") == "a"
    assert n(r"a\.b+") == "a."
    assert n(r"ab\d") == "ab"
    assert n(r"abc|abd") == ""
    assert n(r"a[|]b|c") == ""
    assert n(r"a(?:b|c)") == "a"
    assert n(r"a[]|]x") == "a"
    assert n(r"abc", ignore_case=True) == ""
    for regex in (r"abc?d", r"ab*", r"ab{2}", r"a\.b+", r"ab\d", r"a(?:b|c)", r"a[]|]x"):
        assert _leading_literal(regex).startswith(n(regex))


def test_a_key_streamed_in_pieces_never_reaches_the_terminal() -> None:
    """The streamed text is held while a run of characters may still be a secret's start, and
    shown redacted once it is whole."""
    out = io.StringIO()
    view = TerminalObserver(out, color=False)
    for piece in ["Here: ", GITHUB[:6], GITHUB[6:20], GITHUB[20:], " and ", AWS[:4], AWS[4:]]:
        view.on_delta(Delta(kind="text", text=piece))
        assert GITHUB[:6] not in out.getvalue()
        assert AWS[:8] not in out.getvalue()
    view.on_delta(Delta(kind="text", text="\nA key block:\n" + KEY_BLOCK[:50]))
    assert "b3BlbnNzaC1" not in out.getvalue()
    view.on_delta(Delta(kind="text", text=KEY_BLOCK[50:] + "\nend"))
    view.close()
    shown = out.getvalue()
    assert "Here: [redacted:github-token] and [redacted:aws-access-key]" in shown
    assert "[redacted:private-key]" in shown
    assert shown.rstrip().endswith("end")
    for value in (GITHUB, AWS, "b3BlbnNzaC1"):
        assert value not in shown


def test_a_live_draft_holds_back_a_run_that_may_be_a_secret() -> None:
    assert redact.shown_prefix(f"token {GITHUB[:10]}") == "token "
    assert redact.shown_prefix(f"token {GITHUB} next") == "token [redacted:github-token] "


def test_a_real_run_shows_and_stores_the_key_the_model_prints_redacted(tmp_path: Path) -> None:
    """`bubu run` with a scripted model that reads a key from a file and prints it: neither the
    terminal output nor the database holds it, and a command's environment lacks a variable
    whose value looks like a key."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "deploy.txt").write_text(f"token={ANTHROPIC}\n")
    script = write_script(
        tmp_path / "model.jsonl",
        [
            {"tool_calls": [call("run_command", command="cat deploy.txt; env | grep -c DEPLOYED")]},
            {"text": f"The token is {ANTHROPIC} and the url {URL}"},
        ],
    )
    db = tmp_path / "b.db"
    done = subprocess.run(
        bubu_cmd(db, "run", "show the token", "-w", str(ws), "-m", f"scripted:{script}", "--yes"),
        env={**bubu_env(tmp_path), "DEPLOYED": GITHUB},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    for value in (ANTHROPIC, GITHUB, "Vq8rT2xLm4Kp"):
        assert value not in done.stdout + done.stderr
        for f in db.parent.glob(db.name + "*"):
            assert value.encode() not in f.read_bytes()
    assert "[redacted:anthropic-key]" in done.stdout
    log = subprocess.run(
        bubu_cmd(db, "log", only_session(db), "--jsonl"),
        env=bubu_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "[redacted:anthropic-key]" in log
    assert "[redacted:url-password]" in log
    results = [
        json.loads(line)["event"]["content"]["result"]
        for line in log.splitlines()
        if '"function_response"' in line
    ]
    # The command's environment lacked DEPLOYED: its value looks like a GitHub token.
    assert results[0].splitlines()[1].strip() == "0", results[0]
    assert "token=[redacted:anthropic-key]" in results[0]


def test_the_web_uis_live_draft_is_redacted(tmp_path: Path) -> None:
    """The draft the web UI polls while a model streams is shown as the log will hold it."""
    from bubu.log.sqlite import SQLiteStore
    from bubu.web.runs import RunManager

    with SQLiteStore(tmp_path / "b.db") as store:
        manager = RunManager(store)
        for piece in ["The key ", GITHUB[:9], GITHUB[9:], " is set; next ", AWS[:5]]:
            manager.update_live("ses_x", delta=Delta(kind="text", text=piece))
        live = manager.live("ses_x")
    assert live.draft == "The key [redacted:github-token] is set; next "


def test_a_log_written_elsewhere_with_a_key_is_refused_not_altered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An export (or a store to copy) that holds a value of a known shape, as an older Bubu
    wrote it, is refused in one sentence with nothing created: its chain forbids editing it."""
    from bubu.cli.storecmds import copy_session
    from bubu.errors import StorageError
    from bubu.events import Text, make
    from bubu.log.sqlite import SQLiteStore
    from bubu.log.transfer import export_lines, import_lines

    with monkeypatch.context() as m:  # as a version without shape redaction wrote it
        m.setattr(secretvalues, "sub", lambda text, marker="": text)
        m.setattr(secretvalues, "search", lambda data: None)
        old = SQLiteStore(tmp_path / "old.db")
        sid = old.create_session(title="t", workspace=str(tmp_path)).id
        text = Text(text=f"the key {GITHUB}")
        old.append(
            sid, [make(session=sid, role="user", author="user", ts=1, content=text)], expect=0
        )
        lines = list(export_lines(old, old.session(sid)))
    with SQLiteStore(tmp_path / "new.db") as new:
        with pytest.raises(StorageError, match="looks like a github-token"):
            import_lines(new, lines)
        result = copy_session(old, new, old.session(sid))
        assert result.result == "refused"
        assert "github-token" in (result.reason or "")
        assert list(new.sessions()) == []
    old.close()
