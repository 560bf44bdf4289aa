"""The secret rule, the command environment and the store's redaction, in-process on real SQLite."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from bubu import secrets
from bubu.context.offload import offload_result
from bubu.context.policy import ContextPolicy
from bubu.errors import StorageError
from bubu.events import (
    Actions,
    Error,
    Event,
    FunctionCall,
    FunctionResponse,
    PermissionRequest,
    Text,
    Thinking,
)
from bubu.log import redact
from bubu.log.sqlite import SQLiteStore
from bubu.log.transfer import export_lines, import_lines
from bubu.tools.shell import run_shell

EventFactory = Callable[..., Event]


KEY = "sk-test-0123456789abcdefABCDEF"
TOKEN = 'tok/with"quote\\and-more-42'
ENV = {"OPENAI_API_KEY": KEY, "MY_SERVICE_TOKEN": TOKEN, "SHORT_TOKEN": "1", "PATH": "/usr/bin"}


@pytest.fixture(autouse=True)
def environment() -> Iterator[None]:
    """The secrets of ENV only, for the length of a test; the process's own afterwards."""
    secrets.reset(ENV)
    try:
        yield
    finally:
        secrets.reset()


@pytest.mark.parametrize(
    "name",
    [
        "OPENAI_API_KEY",
        "anthropic_api_key",
        "MY_SERVICE_TOKEN",
        "GITHUB_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "PGPASSWORD",
        "DB_PASSWORD",
        "password",
        "CLIENT_SECRET",
        "SECRET_KEY_BASE",
        "STRIPE_KEY",
        "SSH_PRIVATE_KEY",
        "GPG_PASSPHRASE",
        "MYSQL_PWD",
        "SOME_APIKEY",
        "TOKEN",
    ],
)
def test_secret_names(name: str) -> None:
    """Provider keys, tokens, passwords and *_KEY variables are secrets, in any case."""
    assert secrets.is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "PATH",
        "HOME",
        "PWD",
        "OLDPWD",
        "TOKENIZERS_PARALLELISM",
        "MAX_TOKENS",
        "KEY",
        "KEYBOARD",
        "SSH_AUTH_SOCK",
        "AWS_ACCESS_KEY_ID",
        "OPENAI_BASE_URL",
        "BUBU_HOME",
    ],
)
def test_ordinary_names(name: str) -> None:
    """Names that merely resemble a secret's are passed to commands as usual."""
    assert not secrets.is_secret_name(name)


def test_command_env_withholds_secrets_unless_passed_on() -> None:
    """A command's environment lacks every secret variable except those passed on by name."""
    env = secrets.command_env(environ=ENV)
    assert env == {"PATH": "/usr/bin"}
    passed = secrets.command_env(["MY_SERVICE_TOKEN"], environ=ENV)
    assert passed == {"PATH": "/usr/bin", "MY_SERVICE_TOKEN": TOKEN}


def test_a_real_command_does_not_see_withheld_variables(tmp_path: Path) -> None:
    """run_shell's child process gets the filtered environment (the one call site of it)."""
    os.environ["BUBU_TEST_CHILD_TOKEN"] = "child-secret-value-1"
    try:
        import threading

        shown = run_shell("env", str(tmp_path), 30, threading.Event()).output
        passed = run_shell(
            "env", str(tmp_path), 30, threading.Event(), pass_env=["BUBU_TEST_CHILD_TOKEN"]
        ).output
    finally:
        del os.environ["BUBU_TEST_CHILD_TOKEN"]
    assert "BUBU_TEST_CHILD_TOKEN" not in shown
    assert "PATH=" in shown
    assert "BUBU_TEST_CHILD_TOKEN=child-secret-value-1" in passed
    # Seen for the first time at the command's start: it is redacted from then on.
    assert redact.text("x child-secret-value-1 y") == "x [redacted:BUBU_TEST_CHILD_TOKEN] y"


def test_text_forms_are_recognised() -> None:
    """The value as it is, JSON-escaped (once, twice, with \\/) and percent-encoded."""
    once = json.dumps({"t": TOKEN})
    twice = json.dumps({"body": once})
    slashed = json.dumps(TOKEN)[1:-1].replace("/", "\\/")
    for form in (TOKEN, once, twice, slashed, quote(TOKEN, safe=""), f"Bearer {KEY}"):
        out = redact.text(form)
        assert TOKEN not in out, out
        assert KEY not in out, out
        assert "with" not in out, out
        assert "[redacted:" in out
    assert redact.text("value 1 and yes") == "value 1 and yes"  # too short to be a secret


def test_every_kind_of_event_is_scrubbed_before_the_chain(
    sqlite_store: SQLiteStore, make_event: EventFactory
) -> None:
    """Text, thinking, call arguments, results, errors and permission requests are stored
    redacted; the chain is over the stored bytes, so the log verifies."""
    info = sqlite_store.create_session(title=f"deploy with {KEY}", workspace="/w")
    sid = info.id
    events = [
        make_event(sid, Text(text=f"the key is {KEY}")),
        make_event(sid, Thinking(text=f"I saw {TOKEN}", signature="sig"), role="model"),
        make_event(
            sid,
            FunctionCall(
                call_id="c1",
                name="run_command",
                arguments={"command": f"curl -H 'X: {KEY}'", KEY: [TOKEN]},
            ),
            role="model",
            author="agent",
        ),
        make_event(
            sid,
            FunctionResponse(
                call_id="c1", name="run_command", result=json.dumps({"env": {"T": TOKEN}})
            ),
            role="tool",
            author="tool",
        ),
        make_event(
            sid,
            Error(error_class="auth", message=f"401: Authorization: Bearer {KEY}"),
            role="system",
            author="system",
        ),
        make_event(
            sid,
            actions=Actions(
                permission_request=PermissionRequest(
                    request_id="p1",
                    call_id="c1",
                    tool="run_command",
                    summary=f"run `echo {KEY}`",
                    reason=f"echo {KEY}",
                )
            ),
            role="system",
            author="agent",
        ),
    ]
    sqlite_store.append(sid, events, expect=0)
    stored = b"".join(p for _, _, p in sqlite_store.raw(sid))
    assert KEY.encode() not in stored
    assert b"with" not in stored
    assert stored.count(b"[redacted:OPENAI_API_KEY]") == 6
    assert b"[redacted:MY_SERVICE_TOKEN]" in stored
    assert sqlite_store.session(sid).title == "deploy with [redacted:OPENAI_API_KEY]"
    assert sqlite_store.verify(sid).ok
    call = sqlite_store.read(sid)[2].event.content
    assert isinstance(call, FunctionCall)
    assert call.arguments == {
        "[redacted:OPENAI_API_KEY]": ["[redacted:MY_SERVICE_TOKEN]"],
        "command": "curl -H 'X: [redacted:OPENAI_API_KEY]'",
    }


def test_an_offloaded_blob_is_scrubbed_and_stored_under_its_new_hash(
    sqlite_store: SQLiteStore, make_event: EventFactory
) -> None:
    """A blob holding a secret is redacted before it is hashed, and its event names the new hash."""
    sid = sqlite_store.create_session(title="t", workspace="/w").id
    data = "".join(f"line {i} {KEY}\n" for i in range(2000)).encode()
    placed = offload_result("run_command", data, ContextPolicy())
    assert placed is not None
    text, ref = placed
    ev = make_event(
        sid,
        FunctionResponse(call_id="c", name="run_command", result=text, blob=ref),
        role="tool",
        author="tool",
    )
    sqlite_store.append(sid, [ev], expect=0, blobs=[data])
    (rec,) = sqlite_store.read(sid)
    content = rec.event.content
    assert isinstance(content, FunctionResponse)
    assert content.blob is not None
    assert content.blob.sha256 != ref.sha256
    assert content.blob.lines == 2000
    assert content.blob.sha256 in content.result
    assert ref.sha256 not in content.result
    stored = sqlite_store.blob(content.blob.sha256)
    assert stored is not None
    assert KEY.encode() not in stored
    assert stored.count(b"[redacted:OPENAI_API_KEY]") == 2000
    assert sqlite_store.blob(ref.sha256) is None
    assert sqlite_store.verify(sid).ok
    sqlite_store.close()
    db = Path(sqlite_store.path)
    for f in db.parent.glob(db.name + "*"):
        assert KEY.encode() not in f.read_bytes(), f


def test_a_secret_that_is_a_vocabulary_word_cannot_break_the_log(
    sqlite_store: SQLiteStore, make_event: EventFactory
) -> None:
    """A password that happens to be an event kind is redacted from free text, not from the
    fields whose words it shares, so appends and reads still work."""
    secrets.reset({"DB_PASSWORD": "function_response"})
    sid = sqlite_store.create_session(title="t", workspace="/w").id
    ev = make_event(
        sid,
        FunctionResponse(call_id="c", name="x", result="a function_response b"),
        role="tool",
        author="tool",
    )
    sqlite_store.append(sid, [ev], expect=0)
    (rec,) = sqlite_store.read(sid)
    assert isinstance(rec.event.content, FunctionResponse)
    assert rec.event.content.result == "a [redacted:DB_PASSWORD] b"


def test_an_export_holding_a_secret_of_this_environment_is_refused(
    tmp_path: Path, make_event: EventFactory
) -> None:
    """A log written where the value was not a secret is not silently altered on import."""
    secrets.reset({})
    with SQLiteStore(tmp_path / "a.db") as src:
        sid = src.create_session(title="t", workspace="/w").id
        src.append(sid, [make_event(sid, Text(text=f"key {KEY}"))], expect=0)
        lines = list(export_lines(src, src.session(sid)))
    secrets.reset(ENV)
    with SQLiteStore(tmp_path / "b.db") as dst:
        with pytest.raises(StorageError, match="value of OPENAI_API_KEY"):
            import_lines(dst, lines)
        assert dst.sessions() == []


@pytest.mark.parametrize(
    "value",
    ['p"a/ss\\word123', "ünïcödé-pässwörd", "a b+c/d=e%f&g", "!!!!!!!!!!", "tab\there\nnewline"],
)
def test_every_form_of_any_value_is_found_in_an_event(value: str, make_event: EventFactory) -> None:
    """Whatever characters a value holds, each form of it inside an event is replaced (the quick
    pre-check of an event's bytes never misses one)."""
    secrets.reset({"ODD_TOKEN": value})
    for form in redact.variants(value):
        (ev,), _ = redact.scrub([make_event("ses_x", Text(text=f"before {form} after"))])
        assert isinstance(ev.content, Text)
        assert ev.content.text == "before [redacted:ODD_TOKEN] after", form


def test_the_process_that_runs_commands_is_not_dumpable(tmp_path: Path) -> None:
    """Before the first command starts, Bubu's own /proc/PID/environ (which still holds every
    withheld variable) is closed to the user's other processes: PR_GET_DUMPABLE answers 0."""
    import subprocess
    import sys

    code = (
        "import ctypes, threading; from bubu.tools.shell import run_shell\n"
        "libc = ctypes.CDLL(None)\n"
        "before = libc.prctl(3, 0, 0, 0, 0)\n"
        f"run_shell('true', {str(tmp_path)!r}, 30, threading.Event())\n"
        "print(before, libc.prctl(3, 0, 0, 0, 0))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "0"]


_PROC_ATTACK = """
import subprocess, sys
sys.path.insert(0, sys.argv[1])
import hardening_module as h
read = ["bash", "-c", "tr '\\\\0' '\\\\n' < /proc/$PPID/environ | grep ^X_TOKEN="]
if sys.argv[2] == "hardened":
    h.harden_process(is_secret=lambda name: name == "X_TOKEN")
done = subprocess.run(read, env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
inherited = subprocess.run(["sh", "-c", "echo $X_TOKEN"], capture_output=True, text=True)
assert inherited.stdout.strip() == "value-read-from-the-parent", inherited
print(done.stdout.strip() or done.stderr.strip())
"""


def test_a_command_cannot_read_a_withheld_secret_from_its_parent() -> None:
    """The attack: a command without the variable reads it from /proc/$PPID/environ, Bubu's own
    environment. As an ordinary user (nobody, when the suite runs as root) it works against an
    unprotected parent and is refused by a hardened one; as root it finds the value wiped."""
    import shutil
    import subprocess
    import sys
    import tempfile

    from bubu import hardening

    where = Path(tempfile.mkdtemp(prefix="bubu-proc-"))
    try:
        where.chmod(0o755)
        shutil.copy(hardening.__file__, where / "hardening_module.py")
        (where / "hardening_module.py").chmod(0o644)
        python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
        as_user = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
        user = as_user if os.geteuid() == 0 else []
        env = {"PATH": "/usr/bin:/bin", "X_TOKEN": "value-read-from-the-parent"}
        out = {
            (who, mode): subprocess.run(
                [*prefix, python, "-c", _PROC_ATTACK, str(where), mode],
                env=env,
                cwd="/",
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout.strip()
            for who, prefix in (("user", user), ("self", []))
            for mode in ("plain", "hardened")
        }
    finally:
        shutil.rmtree(where)
    assert out["user", "plain"] == "X_TOKEN=value-read-from-the-parent"
    assert out["self", "plain"] == "X_TOKEN=value-read-from-the-parent"
    assert "Permission denied" in out["user", "hardened"]
    if os.geteuid() == 0:  # root may read any /proc: it finds the value gone
        assert out["self", "hardened"] == "X_TOKEN="
    else:
        assert "Permission denied" in out["self", "hardened"]


def test_an_image_blob_holding_a_secret_is_stored_scrubbed_and_its_reference_follows(
    sqlite_store: SQLiteStore, make_event: EventFactory
) -> None:
    """An image whose bytes hold a secret (a PNG text chunk) is stored scrubbed like any blob,
    and the task's image reference names the stored bytes, so it is never left dangling."""
    from bubu import images
    from bubu.events import Text

    sid = sqlite_store.create_session(title="t", workspace="/w").id
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x10tEXtComment\x00" + KEY.encode() + bytes(64)
    clean = b"\x89PNG\r\n\x1a\n" + bytes(64)
    refs, blobs = images.refs([("image/png", png), ("image/png", clean)])
    ev = make_event(sid, Text(text="look", images=refs))
    sqlite_store.append(sid, [ev], expect=0, blobs=blobs)
    (rec,) = sqlite_store.read(sid)
    content = rec.event.content
    assert isinstance(content, Text)
    moved, kept = content.images
    assert moved.sha256 != refs[0].sha256
    assert kept == refs[1]
    stored = sqlite_store.blob(moved.sha256)
    assert stored is not None
    assert KEY.encode() not in stored
    assert len(stored) == moved.size
    assert sqlite_store.blob(kept.sha256) == clean
    assert sqlite_store.verify(sid).ok
