"""Tool faults: paths that lead out of the workspace, a 1 GB file, binary and invalid UTF-8 output,
daemons, a command that ignores SIGTERM, one that prints forever, a read-only file, an edit whose
text is missing or ambiguous.

The scripted model calls the real tools through the engine; each row checks the result text the
model is shown, the events written, and that the log verifies. The rows about memory run `bubu`
as a real process and read its peak resident size from the kernel.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bubu.engine.permissions import Policy
from bubu.events import FunctionResponse
from bubu.log.sqlite import SQLiteStore

from .helpers import (
    Run,
    bubu_cmd,
    bubu_env,
    call,
    kinds,
    read,
    results,
    run_script,
    turn_end,
    wait_for,
    write_script,
)

YES = Policy(yes=True, sandbox="off")
"""Unconfined: these tests follow the command's processes by their pids (tests/tools/test_sandbox.py
covers the sandbox)."""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace with one small file, next to an `outside` directory holding a secret."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("SECRET\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    return ws


def one_call(
    tmp_path: Path, ws: Path, name: str, args: dict[str, object], policy: Policy | None = None
) -> Run:
    """A turn in which the model makes one tool call and then answers."""
    return run_script(
        tmp_path, ws, [{"tool_calls": [call(name, **args)]}, {"text": "noted"}], policy=policy
    )


def only_result(run: Run) -> tuple[str, bool]:
    """The text and error flag of the turn's one tool result; the turn completed."""
    assert run.reason == "completed"
    assert turn_end(run.records).reason == "completed"
    (result,) = run.results
    return result.result, result.is_error


# ---- leaving the workspace ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("read_file", {"path": "../outside/secret.txt"}),
        ("read_file", {"path": "/etc/passwd"}),  # absolute: it says only the workspace
        ("write_file", {"path": "../outside/escape.txt", "content": "x"}),
        ("edit_file", {"path": "../outside/secret.txt", "old": "SECRET", "new": "PWNED"}),
        ("list_files", {"path": ".."}),
        ("grep", {"pattern": "SECRET", "path": "../outside"}),
    ],
)
def test_a_path_leading_out_is_asked_for_and_refused(
    tmp_path: Path, ws: Path, tool: str, args: dict[str, object]
) -> None:
    run = one_call(tmp_path, ws, tool, args)
    text, is_error = only_result(run)
    path = str(args["path"])
    target = os.path.realpath(ws / path)
    assert is_error
    said = f"{path} is outside the workspace {ws.resolve()}"
    if target != path:
        said += f" (it leads to {target})"
    said = f"permission denied: nobody was there to approve it: {said}"
    if tool in ("write_file", "edit_file"):  # a write outside asks a person, --yes or not
        assert text.startswith(f"{said}; --allow-write PATH allows a write there ahead of time")
        assert text.endswith("; only a person can approve it (--yes does not)")
    else:
        assert text == said
    assert run.kinds[4:8] == [
        "function_call",
        "permission_request",
        "permission_decision",
        "function_response",
    ]
    assert "tool_dispatch" not in run.kinds, "the tool never ran"
    assert (tmp_path / "outside" / "secret.txt").read_text() == "SECRET\n"
    assert not (tmp_path / "outside" / "escape.txt").exists()


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("read_file", {"path": "door/secret.txt"}),
        ("read_file", {"path": "link.txt"}),
        ("write_file", {"path": "link.txt", "content": "x"}),
        ("edit_file", {"path": "link.txt", "old": "SECRET", "new": "PWNED"}),
        ("write_file", {"path": "door/new.txt", "content": "x"}),
    ],
)
def test_a_symlink_leading_out_is_refused(
    tmp_path: Path, ws: Path, tool: str, args: dict[str, object]
) -> None:
    (ws / "door").symlink_to(tmp_path / "outside")
    (ws / "link.txt").symlink_to(tmp_path / "outside" / "secret.txt")
    run = one_call(tmp_path, ws, tool, args)
    text, is_error = only_result(run)
    assert is_error
    assert text.startswith(
        f"permission denied: nobody was there to approve it: {args['path']} is outside"
    )
    assert "tool_dispatch" not in run.kinds
    assert (tmp_path / "outside" / "secret.txt").read_text() == "SECRET\n"
    assert sorted(p.name for p in (tmp_path / "outside").iterdir()) == ["secret.txt"]


def test_searching_never_follows_a_symlink_out(tmp_path: Path, ws: Path) -> None:
    (ws / "door").symlink_to(tmp_path / "outside")
    (ws / "link.txt").symlink_to(tmp_path / "outside" / "secret.txt")
    run = run_script(
        tmp_path,
        ws,
        [
            {
                "tool_calls": [
                    call("grep", pattern="SECRET"),
                    call("list_files", pattern="**/*.txt"),
                ]
            },
            {"text": "noted"},
        ],
    )
    found, listed = sorted(run.results, key=lambda r: r.name)
    assert found.result == "no matches for SECRET"
    assert "secret.txt" not in listed.result
    assert "a.txt" in listed.result


# ---- large, binary and invalid output ----------------------------------------------------------


_MEASURE = (
    "import resource, subprocess, sys\n"
    "code = subprocess.call(sys.argv[2:], stdin=subprocess.DEVNULL)\n"
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
    "sys.exit(code)\n"
)
"""Runs a command and writes its peak RSS (KB). The command is forked from this small process, not
from the test runner, whose own (large) image would otherwise count in the child's peak."""


def peak_rss_mb(db: Path, *args: str, timeout: float = 120) -> tuple[int, str, int]:
    """Run `bubu` to its end; its exit code, stdout and peak resident size (MB)."""
    out_file = db.parent / "out.txt"
    rss_file = db.parent / "rss.txt"
    with out_file.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", _MEASURE, str(rss_file), *bubu_cmd(db, *args)],
            env=bubu_env(db.parent),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            proc.wait(timeout=timeout)  # a hang fails here, never blocks
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    text = out_file.read_text()
    assert "Traceback" not in text, text
    return proc.returncode, text, int(rss_file.read_text()) // 1024


@pytest.mark.heavy
def test_reading_a_1_gb_file_is_bounded(tmp_path: Path, ws: Path) -> None:
    big = ws / "big.log"
    with big.open("wb") as f:
        f.write(b"".join(b"line %d of the log\n" % n for n in range(1, 3001)))
        f.seek(1 << 30)  # a hole: a gigabyte of NUL bytes the disk does not hold
        f.write(b"\nthe end\n")
    assert big.stat().st_size > 1 << 30
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {"tool_calls": [call("read_file", path="big.log")]},
            {"tool_calls": [call("read_file", path="big.log", offset=3001)]},
            {"text": "read both ends"},
        ],
    )
    db = tmp_path / "bubu.db"
    code, out, peak = peak_rss_mb(db, "run", "read it", "-w", str(ws), "-m", f"scripted:{script}")
    assert code == 0, out
    assert peak < 300, f"peak RSS {peak} MB"
    first, last = (whole(db, r) for r in results(read(db)))
    assert first.startswith("     1\tline 1 of the log\n")
    assert first.endswith("(lines 1–2,000 of 3,002; next: offset=2001)")
    # The gigabyte of NULs is one line: shown cut to its first 2,000 bytes, then the last line.
    line, end, footer = last.split("\n")
    assert line.startswith("  3001\t")
    assert len(line) < 2100
    assert re.search(r" … \[line cut: 1,07[\d,]+ more bytes\]$", line)
    assert (end, footer) == ("  3002\tthe end", "(lines 3,001–3,002 of 3,002; end of file)")


def test_binary_output_is_shown_as_text_and_stored_as_valid_utf8(tmp_path: Path, ws: Path) -> None:
    run = one_call(
        tmp_path,
        ws,
        "run_command",
        {"command": "head -c 3000 /dev/urandom; printf '\\0\\1\\2\\n'"},
        YES,
    )
    text, is_error = only_result(run)
    assert not is_error
    assert text.endswith("exit code 0")
    assert "\ufffd" in text
    text.encode("utf-8")  # the committed text is valid UTF-8 (the chain verified over it)


def test_invalid_utf8_is_replaced_in_output_and_files_stay_untouched(
    tmp_path: Path, ws: Path
) -> None:
    (ws / "latin1.txt").write_bytes(b"caf\xe9 cr\xe8me\n")
    run = run_script(
        tmp_path,
        ws,
        [
            {
                "tool_calls": [
                    call("run_command", command="printf 'caf\\xe9 \\xff\\xfe ok\\n'"),
                    call("read_file", path="latin1.txt"),
                ]
            },
            {"text": "noted"},
        ],
        policy=YES,
    )
    shown, printed = sorted(run.results, key=lambda r: r.name)
    assert printed.result == "caf\ufffd \ufffd\ufffd ok\nexit code 0"
    assert shown.result == "     1\tcaf\ufffd cr\ufffdme"
    assert (ws / "latin1.txt").read_bytes() == b"caf\xe9 cr\xe8me\n"


# ---- processes that do not go away -------------------------------------------------------------


def test_a_daemon_that_keeps_the_output_open_does_not_hang_the_tool(
    tmp_path: Path, ws: Path
) -> None:
    run = one_call(
        tmp_path,
        ws,
        "run_command",
        {"command": "sleep 60 & echo $! > daemon.pid; echo started"},
        YES,
    )
    text, is_error = only_result(run)
    assert text == (
        "started\nexit code 0; background processes kept the output open and were stopped"
    )
    assert not is_error
    pid = int((ws / "daemon.pid").read_text())
    wait_for(lambda: not _alive(pid), "the daemon to be stopped", 10)


def test_a_detached_daemon_is_left_running_and_the_tool_returns(tmp_path: Path, ws: Path) -> None:
    run = one_call(
        tmp_path,
        ws,
        "run_command",
        {
            "command": (
                "setsid sleep 60 > /dev/null 2>&1 < /dev/null & echo $! > daemon.pid; echo started"
            )
        },
        YES,
    )
    pid = int((ws / "daemon.pid").read_text())
    try:
        text, is_error = only_result(run)
        assert text == "started\nexit code 0"
        assert not is_error
        assert _alive(pid), "a daemon with output of its own is the user's business"
    finally:
        os.kill(pid, signal.SIGKILL)


@pytest.mark.heavy
def test_a_command_that_ignores_sigterm_is_killed_at_its_timeout(tmp_path: Path, ws: Path) -> None:
    run = one_call(
        tmp_path,
        ws,
        "run_command",
        {
            "timeout_s": 0.5,
            "command": "trap '' TERM; echo $$ > stubborn.pid; while :; do sleep 0.05; done",
        },
        YES,
    )
    text, is_error = only_result(run)
    assert is_error
    assert text == "(no output)\ntimed out after 0.5s; the command and its processes were killed"
    assert not _alive(int((ws / "stubborn.pid").read_text()))


@pytest.mark.heavy
def test_a_command_that_prints_forever_is_cut_at_its_timeout_in_bounded_memory(
    tmp_path: Path, ws: Path
) -> None:
    script = write_script(
        tmp_path / "s.jsonl",
        [
            {
                "tool_calls": [
                    call("run_command", command="yes 'all work and no play'", timeout_s=2)
                ]
            },
            {"text": "that was a lot"},
        ],
    )
    db = tmp_path / "bubu.db"
    code, out, peak = peak_rss_mb(
        db, "run", "print", "-w", str(ws), "-m", f"scripted:{script}", "--yes"
    )
    assert code == 0, out
    assert peak < 400, f"peak RSS {peak} MB"
    records = read(db)
    (result,) = results(records)
    assert result.is_error
    # More than is kept whole: the placeholder says the middle is stored nowhere.
    assert re.match(
        r"\[large result of run_command stored: [\d,]+ bytes, [\d,]+ lines, sha256 \w+; not the "
        r"whole output: [\d,]+ bytes from its middle were dropped and are stored nowhere\]",
        result.result,
    )
    text = whole(db, result)
    assert text.startswith("all work and no play\n")
    assert re.search(r"\n… \[[\d,]+ bytes omitted\] …\n", text)
    # How it ended is the result's metadata: it ends the placeholder, not the stored output.
    ending = (
        r"timed out after 2s; the command and its processes were killed; the output was [\d,]+ "
        r"bytes, more than the 64 MiB kept whole: only its first and last bytes are kept, [\d,]+ "
        r"bytes between them were dropped$"
    )
    assert re.search(ending, result.result)
    assert not re.search(ending, text.rstrip("\n"))
    assert kinds(records)[-1] == "turn_ended"


def whole(db: Path, result: FunctionResponse) -> str:
    """A tool result as the model can read it in full: inline, or its offloaded blob."""
    if result.blob is None:
        return result.result
    with SQLiteStore(db) as store:
        data = store.blob(result.blob.sha256)
    assert data is not None
    return data.decode("utf-8")


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X")


# ---- writes that cannot happen -----------------------------------------------------------------


def test_a_write_to_a_read_only_file_is_refused_and_the_file_kept(tmp_path: Path, ws: Path) -> None:
    locked = ws / "locked.txt"
    locked.write_text("keep\n")
    locked.chmod(0o444)
    run = run_script(
        tmp_path,
        ws,
        [
            {
                "tool_calls": [
                    call("write_file", path="locked.txt", content="changed\n"),
                    call("edit_file", path="locked.txt", old="keep", new="lose"),
                ]
            },
            {"text": "noted"},
        ],
    )
    message = "locked.txt is read-only; it was not changed (ask the user to make it writable)"
    assert [(r.result, r.is_error) for r in run.results] == [(message, True)] * 2
    assert "tool_dispatch" not in run.kinds, "refused before dispatch: nothing to recover"
    assert locked.read_text() == "keep\n"


def test_an_edit_whose_text_is_missing_or_ambiguous_changes_nothing(
    tmp_path: Path, ws: Path
) -> None:
    code = ws / "code.py"
    code.write_text("x = 1\nx = 1\ny = 2\n")
    run = run_script(
        tmp_path,
        ws,
        [
            {
                "tool_calls": [
                    call("edit_file", path="code.py", old="z = 3", new="z = 4"),
                    call("edit_file", path="code.py", old="x = 1", new="x = 9"),
                ]
            },
            {"text": "noted"},
        ],
    )
    missing, twice = run.results
    assert (missing.is_error, twice.is_error) == (True, True)
    assert missing.result == (
        "old was not found in code.py; read the file and copy the text exactly, whitespace included"
    )
    assert twice.result == (
        "old was found 2 times in code.py; include more surrounding text to make it unique, or "
        "set replace_all to true"
    )
    assert code.read_text() == "x = 1\nx = 1\ny = 2\n"
