"""A worker's policy ceiling: a task asking for more is held in the log until a person approves."""

from __future__ import annotations

from pathlib import Path

import pytest

from bubu import clock
from bubu.engine.ceiling import Asked, Ceiling, excess, held_request, hold_state
from bubu.engine.worker import check_open_turn
from bubu.errors import ConfigError
from bubu.events import Record, SystemNote, TaskApproved, TaskHeld, TurnStarted, make
from bubu.log.postgres import PostgresStore, WorkQueue
from bubu.projections.status import fold_status

from .checks import check_log
from .proc import WorkerProc, bubu, bubu_json, bubu_ok, command, write_script

ATTACK = ["--sandbox", "off", "--yes"]
"""What a command that reached the fleet's database queued: an unconfined task that asks nothing."""


def _notes(pg: PostgresStore, session: str) -> list[object]:
    return [c.note for r in pg.read(session) if isinstance(c := r.event.content, SystemNote)]


@pytest.mark.heavy
@pytest.mark.postgres
def test_a_task_above_the_ceiling_is_held_until_a_person_approves_it(
    tmp_path: Path, url: str, pg: PostgresStore
) -> None:
    model = write_script(tmp_path / "m.jsonl", [command("touch ran"), {"text": "done"}])
    sessions: dict[str, str] = {}
    for name, extra in {"attack": ATTACK, "net": ["--network"], "plain": []}.items():
        ws = tmp_path / name
        ws.mkdir()
        out = bubu_ok(tmp_path, "submit", "go", "--db", url, "-w", str(ws), "-m", model, *extra)
        sessions[name] = out.strip()

    worker = WorkerProc(tmp_path, url, "--once")
    assert worker.wait() == 0
    assert "nothing looser" in worker.lines()[0]
    # The plain task ran in the sandbox; the two others were held: not run, not failed.
    assert fold_status(pg.read(sessions["plain"])).state == "completed"
    assert (tmp_path / "plain" / "ran").exists()
    for name in ("attack", "net"):
        assert not (tmp_path / name / "ran").exists()
        st = fold_status(pg.read(sessions[name]))
        assert st.state == "held"
        assert st.turns == 0
        assert WorkQueue(pg).state(sessions[name]) == "held"
        assert any(f"finish {sessions[name]} held" in ln for ln in worker.lines())
    (held,) = [n for n in _notes(pg, sessions["attack"]) if isinstance(n, TaskHeld)]
    assert len(held.reasons) == 2
    assert "--sandbox off" in held.reasons[0]
    assert "--max-sandbox workspace-write" in held.reasons[0]
    assert "--yes" in held.reasons[1]

    # Where a person looks: the fleet's tasks, the session's status, the session list.
    tasks = {r["session"]: r for r in bubu_json(tmp_path, "fleet", "tasks", "--db", url, "--json")}
    assert tasks[sessions["attack"]]["state"] == "held"
    assert tasks[sessions["attack"]]["held_reasons"] == held.reasons
    assert sessions["plain"] not in tasks
    text = bubu_ok(tmp_path, "fleet", "tasks", "--db", url)
    assert "held: it asks for --network" in text
    assert "bubu approve-task" in text
    status = bubu_json(tmp_path, "--db", url, "status", sessions["attack"], "--json")
    assert status["status"] == "held"
    assert "--sandbox off" in status["reason"]
    listed = bubu_json(tmp_path, "--db", url, "sessions", "--status", "held", "--json")
    assert {r["id"] for r in listed} == {sessions["attack"], sessions["net"]}

    # A second worker does not claim a held task again.
    assert WorkerProc(tmp_path, url, "--once", name="again").wait() == 0
    assert len([n for n in _notes(pg, sessions["attack"]) if isinstance(n, TaskHeld)]) == 1

    # Approving is a fact in the log; the next worker runs the task as it was submitted.
    plain_approve = bubu(tmp_path, "--db", url, "approve-task", sessions["plain"])
    assert plain_approve.returncode == 1
    assert "is not held" in plain_approve.stderr
    out = bubu_ok(tmp_path, "--db", url, "approve-task", sessions["attack"])
    assert "approved" in out
    assert "--sandbox off" in out
    assert WorkQueue(pg).state(sessions["attack"]) == "queued"
    assert WorkerProc(tmp_path, url, "--once", name="after").wait() == 0
    assert (tmp_path / "attack" / "ran").exists()
    checked = check_log(pg, sessions["attack"])
    assert fold_status(checked.records).state == "completed"
    notes = _notes(pg, sessions["attack"])
    (approved,) = [n for n in notes if isinstance(n, TaskApproved)]
    assert approved.request_seq == held.request_seq
    assert approved.by
    (started,) = [n for n in notes if isinstance(n, TurnStarted)]
    assert started.sandbox == "off"
    assert started.yes
    # The other held task is still held: one approval approves one task.
    assert fold_status(pg.read(sessions["net"])).state == "held"


@pytest.mark.heavy
@pytest.mark.postgres
def test_a_worker_whose_ceiling_allows_it_runs_the_task_unheld(
    tmp_path: Path, url: str, pg: PostgresStore
) -> None:
    model = write_script(tmp_path / "m.jsonl", [command("touch ran"), {"text": "done"}])
    ws = tmp_path / "ws"
    ws.mkdir()
    sid = bubu_ok(tmp_path, "submit", "go", "--db", url, "-w", str(ws), "-m", model, *ATTACK)
    assert WorkerProc(tmp_path, url, "--once", "--max-sandbox", "off", "--allow-yes").wait() == 0
    assert (ws / "ran").exists()
    assert not any(isinstance(n, TaskHeld) for n in _notes(pg, sid.strip()))


def test_bad_ceiling_flags_are_refused_in_one_line(tmp_path: Path) -> None:
    done = bubu(tmp_path, "worker", "--db", "postgresql://x/y", "--max-sandbox", "loose")
    assert done.returncode == 2
    assert "workspace-write" in done.stderr


def test_every_loosening_option_a_submitter_sets_is_checked() -> None:
    careful = Ceiling()
    assert excess(careful, Asked(sandbox="workspace-write")) == ()
    assert excess(careful, Asked(sandbox="read-only")) == ()
    cases = {
        "--sandbox off": Asked(sandbox="off"),
        "--yes": Asked(sandbox="workspace-write", yes=True),
        "--network": Asked(sandbox="workspace-write", network=True),
        "DB_PASSWORD": Asked(sandbox="workspace-write", pass_env=("DB_PASSWORD",)),
    }
    for word, asked in cases.items():
        (reason,) = excess(careful, asked)
        assert word in reason
    # Allow patterns approve only unconfined commands: off, or where bubblewrap cannot run.
    patterns = Asked(sandbox="workspace-write", allow_commands=("echo *",))
    assert excess(careful, patterns) == ()
    assert "'echo *'" in excess(careful, patterns, sandbox_works=False)[0]
    # The order is off < workspace-write < read-only.
    strict = Ceiling(max_sandbox="read-only")
    assert "--sandbox workspace-write" in excess(strict, Asked(sandbox="workspace-write"))[0]
    loose = Ceiling(
        max_sandbox="off",
        allow_yes=True,
        allow_network=True,
        allow_patterns=True,
        allow_env=frozenset({"DB_PASSWORD"}),
    )
    everything = Asked(
        sandbox="off", yes=True, network=True, allow_commands=("x",), pass_env=("DB_PASSWORD",)
    )
    assert excess(loose, everything, sandbox_works=False) == ()


def test_a_task_naming_another_model_server_is_held_the_vendors_own_are_not() -> None:
    """A submitter who names the server (`bubu submit --base-url`) would have the worker send
    its API key there: that is a loosening like the others."""
    careful = Ceiling()
    (reason,) = excess(
        careful, Asked(sandbox="workspace-write", base_url="https://evil.example/v1")
    )
    assert "https://evil.example/v1" in reason
    assert "--allow-base-url" in reason
    for official in ("https://api.openai.com/v1", "https://api.anthropic.com", None):
        assert excess(careful, Asked(sandbox="workspace-write", base_url=official)) == ()
    # Not the vendor's host over plain HTTP, nor a look-alike.
    for other in ("http://api.openai.com/v1", "https://api.openai.com.evil.example/v1"):
        assert excess(careful, Asked(sandbox="workspace-write", base_url=other)), other
    mine = Ceiling(allow_base_urls=frozenset({"http://vllm.internal:8000/v1/"}))
    assert (
        excess(mine, Asked(sandbox="workspace-write", base_url="http://VLLM.internal:8000/v1"))
        == ()
    )


@pytest.mark.heavy
@pytest.mark.postgres
def test_a_submitted_base_url_is_held_before_the_worker_calls_it(
    tmp_path: Path, url: str, pg: PostgresStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket
    import threading

    # A port for the submitter's server; it listens only once the task is queued (`bubu submit`
    # itself may look at the server it names), and records whether the worker calls it.
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    ws = tmp_path / "ws"
    ws.mkdir()
    evil = f"http://127.0.0.1:{port}/v1"
    sid = bubu_ok(
        tmp_path,
        "submit",
        "go",
        "--db",
        url,
        "-w",
        str(ws),
        "-m",
        "openai:gpt-x",
        "--base-url",
        evil,
    ).strip()
    server = socket.socket()
    server.bind(("127.0.0.1", port))
    server.listen(4)
    seen: list[bytes] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                seen.append(conn.recv(65536))

    threading.Thread(target=accept, daemon=True).start()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-worker-own-key")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    worker = WorkerProc(tmp_path, url, "--once")
    assert worker.wait() == 0
    server.close()
    # (Building the provider looks for the server's window: GETs without any credential.)
    sent = [r for r in seen if b"sk-worker-own-key" in r or r.startswith(b"POST")]
    assert sent == [], "the worker sent its key to the submitter's server"
    (held,) = [n for n in _notes(pg, sid) if isinstance(n, TaskHeld)]
    assert any(evil in r for r in held.reasons), held.reasons


def _note(seq: int, note: TaskHeld | TaskApproved | TurnStarted) -> Record:
    ev = make(
        session="s",
        role="system",
        author="host",
        ts=clock.now_ms(),
        content=SystemNote(note=note),
        visibility="hidden",
    )
    return Record(seq=seq, hash="", event=ev)


def test_a_hold_is_lifted_only_by_an_approval_of_that_request() -> None:
    held = [_note(2, TaskHeld(request_seq=1, reasons=["r"]))]
    assert hold_state(held, 1) == "held"
    assert held_request(held) is not None
    other = [*held, _note(3, TaskApproved(request_seq=7))]
    assert hold_state(other, 1) == "held"
    assert held_request(other) is not None
    approved = [*held, _note(3, TaskApproved(request_seq=1))]
    assert hold_state(approved, 1) == "approved"
    assert held_request(approved) is None


def test_an_open_turn_above_the_ceiling_is_not_continued_unapproved() -> None:
    """A turn written straight into the log (or started by `bubu run --sandbox off` on the fleet's
    database) gets no more from a worker than a queued task would."""
    opened = [_note(2, TurnStarted(model="scripted:x", sandbox="off", yes=True))]
    with pytest.raises(ConfigError, match="above this worker's ceiling"):
        check_open_turn(opened, Ceiling(), "s")
    check_open_turn(opened, Ceiling(max_sandbox="off", allow_yes=True), "s")
    approved = [_note(1, TaskApproved(request_seq=1)), *opened]
    check_open_turn(approved, Ceiling(), "s")
    sandboxed = [_note(2, TurnStarted(model="scripted:x", sandbox="workspace-write"))]
    check_open_turn(sandboxed, Ceiling(), "s")
