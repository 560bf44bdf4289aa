"""Paths resolved beneath the workspace descriptor (`bubu.tools.guard`), and the write lock.

The race tests swap a directory of the workspace for a symlink to an outside directory in a tight
loop while the file tools run against paths through it: nothing outside is ever written or read.
The lock tests race writers of one counter file, threads and then processes: no update is lost.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bubu.tools import ToolContext
from bubu.tools.base import JSON, Tool
from bubu.tools.guard import Escape, Root, locate, open_beneath, resolve_beneath
from bubu.tools.workspace import resolved_relative

# ---- the API ------------------------------------------------------------------------------------


@pytest.fixture
def root(ws: Path) -> Iterator[Root]:
    """The workspace opened as a root."""
    with Root.open(str(ws)) as r:
        yield r


def test_resolve_beneath_follows_symlinks_that_stay_inside(ws: Path, root: Root) -> None:
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "pkg" / "a.py").write_text("x")
    (ws / "rel").symlink_to("src/pkg")
    (ws / "abs").symlink_to(ws / "src")  # absolute, but into the workspace
    (ws / "src" / "up").symlink_to("..")
    assert resolve_beneath(root, "rel/a.py") == "src/pkg/a.py"
    assert resolve_beneath(root, "abs/pkg/a.py") == "src/pkg/a.py"
    assert resolve_beneath(root, "src/up/rel/../pkg/a.py") == "src/pkg/a.py"
    assert resolve_beneath(root, "rel/new/dir/file.txt") == "src/pkg/new/dir/file.txt"
    assert resolve_beneath(root, "new/../src/./pkg/") == "src/pkg"
    assert resolve_beneath(root, ".") == "."
    fd = open_beneath(root, "abs/pkg/a.py", os.O_RDONLY)
    with os.fdopen(fd) as f:
        assert f.read() == "x"


def test_resolve_beneath_refuses_every_way_out(ws: Path, outside: Path, root: Root) -> None:
    (ws / "d").mkdir()
    (ws / "door").symlink_to(outside)
    (ws / "d" / "back").symlink_to("../../outside/secret.txt")
    (ws / "chain").symlink_to("d/back")
    (ws / "dangling").symlink_to(outside / "missing.txt")
    for rel in ["..", "d/../../x", "door/secret.txt", "d/back", "chain", "dangling"]:
        with pytest.raises(Escape):
            resolve_beneath(root, rel)
        with pytest.raises(Escape):
            open_beneath(root, rel, os.O_RDONLY)
    with pytest.raises(Escape, match=r"the symlink door points outside the workspace"):
        locate(root, "door/new.txt", create=True)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_a_symlink_loop_and_a_file_used_as_a_directory_are_errors(ws: Path, root: Root) -> None:
    (ws / "loop").symlink_to("loop")
    (ws / "f").write_text("")
    with pytest.raises(OSError, match="too many levels of symbolic links"):
        resolve_beneath(root, "loop/x")
    with pytest.raises(NotADirectoryError):
        open_beneath(root, "f/x", os.O_RDONLY)


def test_resolved_relative_is_the_path_a_permission_check_sees(ws: Path, outside: Path) -> None:
    (ws / ".git").mkdir()
    (ws / "innocent").symlink_to(".git")
    (ws / "door").symlink_to(outside)
    ctx = ToolContext(workspace=ws)
    assert resolved_relative(ctx, "innocent/config") == ".git/config"
    assert resolved_relative(ctx, str(ws / "innocent" / "hooks")) == ".git/hooks"
    assert resolved_relative(ctx, "door/secret.txt") is None
    assert resolved_relative(ctx, "/etc/passwd") is None


# ---- a directory swapped for a symlink, in a tight loop ---------------------------------------


def _swapper(ws: Path, outside: Path, stop: threading.Event, swaps: list[int]) -> None:
    """Swap ws/d between the real directory and a symlink to `outside` until told to stop."""
    d, away = ws / "d", ws / "d.away"
    while not stop.is_set():
        os.rename(d, away)
        # A write may create d again while it is missing (it makes parent directories).
        while True:
            try:
                os.symlink(outside, d)
                break
            except FileExistsError:
                shutil.rmtree(d, ignore_errors=True)
        time.sleep(0)
        os.unlink(d)
        while True:
            try:
                os.rename(away, d)
                break
            except OSError:
                shutil.rmtree(d, ignore_errors=True)
        swaps[0] += 1


RACE_ERRORS = (
    "is outside the workspace ",
    "does not exist; use ",
    "changed since this call was prepared",
    "was just replaced by a symlink",
    "now resolves to",
    "was not written: its directory changed",
    "was not found in d/t.txt",  # the other edit's text: the file was edited (inside)
)
"""What a call that lost the race may say: a clear sentence, never a traceback."""


def _outside_state(outside: Path) -> dict[str, str]:
    return {
        str(p.relative_to(outside)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(outside.rglob("*"))
        if p.is_file()
    }


def test_a_directory_swapped_for_a_symlink_never_leads_a_tool_out(
    tools: dict[str, Tool], ws: Path, outside: Path, ctx: ToolContext
) -> None:
    (outside / "t.txt").write_text("SECRET outside\n")
    (ws / "d").mkdir()
    (ws / "d" / "t.txt").write_text("inside\n")
    before = _outside_state(outside)
    calls: list[tuple[str, dict[str, JSON]]] = [
        ("write_file", {"path": "d/t.txt", "content": "inside\n"}),
        ("write_file", {"path": "d/new.txt", "content": "PWNED\n"}),
        ("edit_file", {"path": "d/t.txt", "old": "inside", "new": "INSIDE"}),
        ("edit_file", {"path": "d/t.txt", "old": "INSIDE", "new": "inside"}),
        ("read_file", {"path": "d/t.txt"}),
        ("list_files", {"path": "d"}),
        ("grep", {"pattern": "SEC.ET|sec.et", "path": "d"}),
        ("grep", {"pattern": "SEC.ET|sec.et"}),
    ]
    stop, swaps = threading.Event(), [0]
    swapper = threading.Thread(target=_swapper, args=(ws, outside, stop, swaps), daemon=True)
    seen: dict[str, set[bool]] = {}
    swapper.start()
    try:
        deadline = time.monotonic() + 20
        rounds = 0
        # Until the tools have both worked and been refused (both sides of the race were met).
        while rounds < 40 or (
            time.monotonic() < deadline
            and any(len(seen[n]) < 2 for n in ("write_file", "read_file", "list_files"))
        ):
            rounds += 1
            for name, args in calls:
                result = tools[name].run(args, ctx, None)
                assert "SECRET" not in result.output, (name, result.output)
                assert "secret" not in result.output, (name, result.output)
                assert "PWNED" not in (outside / "t.txt").read_text()
                seen.setdefault(name, set()).add(result.is_error)
                if result.is_error:
                    assert any(e in result.output for e in RACE_ERRORS), result.output
    finally:
        stop.set()
        swapper.join()
    assert swaps[0] > 10
    assert _outside_state(outside) == before
    assert not (outside / "new.txt").exists()
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt", "t.txt"]
    # The race really was run: each tool named both worked and was refused.
    assert seen["write_file"] == seen["read_file"] == seen["list_files"] == {True, False}
    assert (ws / "d" / "t.txt").read_text() in ("inside\n", "INSIDE\n")


def test_a_refused_symlink_says_why(
    tools: dict[str, Tool], ws: Path, outside: Path, ctx: ToolContext
) -> None:
    (ws / "d").mkdir()
    args: dict[str, JSON] = {"path": "d/new.txt", "content": "x"}
    intent = tools["write_file"].prepare(args, ctx)
    (ws / "d").rmdir()
    (ws / "d").symlink_to(outside)  # swapped between the dispatch and the write
    result = tools["write_file"].run(args, ctx, intent)
    assert result.is_error
    assert result.output.startswith(f"d/new.txt is outside the workspace {ws.resolve()} (")
    assert not (outside / "new.txt").exists()


# ---- the write lock ------------------------------------------------------------------------------


def _bump(tools: dict[str, Tool], ctx: ToolContext) -> bool:
    """Read the counter, write it plus one (prepared first, like a dispatch); True if applied.

    The write is meant for the counter as read: when another writer got in between the read and
    the prepare (whose before-hash is then of another value), it is not made."""
    seen = (ctx.workspace / "n.txt").read_bytes()
    args: dict[str, JSON] = {"path": "n.txt", "content": str(int(seen or b"0") + 1)}
    tool = tools["write_file"]
    try:
        intent = tool.prepare(args, ctx)
    except Exception:
        return False
    if intent is None or intent.before_sha256 != hashlib.sha256(seen).hexdigest():
        return False
    result = tool.run(args, ctx, intent)
    if result.is_error:
        assert "changed since this call was prepared" in result.output, result.output
        return False
    return "replaced" in result.output


def _race(bump: Callable[[], bool], threads: int, rounds: int) -> int:
    done = [0] * threads

    def work(i: int) -> None:
        for _ in range(rounds):
            done[i] += bump()

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return sum(done)


def test_writers_in_threads_lose_no_update(
    tools: dict[str, Tool], ws: Path, ctx: ToolContext
) -> None:
    (ws / "n.txt").write_text("0")
    applied = _race(lambda: _bump(tools, ctx), threads=4, rounds=40)
    assert applied > 0
    assert int((ws / "n.txt").read_text()) == applied  # every reported write is in the file


_WORKER = """
import sys
from pathlib import Path
from bubu.tools import ToolContext, builtin_tools
sys.path.insert(0, sys.argv[2])
from test_guard import _bump, _race
ctx = ToolContext(workspace=Path(sys.argv[1]))
tools = builtin_tools()
print(_race(lambda: _bump(tools, ctx), threads=2, rounds=int(sys.argv[3])))
"""


def test_writers_in_two_processes_lose_no_update(ws: Path) -> None:
    (ws / "n.txt").write_text("0")
    here = str(Path(__file__).parent)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(ws), here, "30"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    applied = 0
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        applied += int(out)
    assert applied > 0
    assert int((ws / "n.txt").read_text()) == applied


def test_an_escape_names_the_symlink_that_leads_out(ws: Path, outside: Path, root: Root) -> None:
    (ws / "d").mkdir()
    (ws / "d" / "back").symlink_to("../../outside")
    with pytest.raises(Escape) as caught:
        resolve_beneath(root, "d/back/secret.txt")
    assert (caught.value.link, caught.value.target) == ("d/back", "../../outside")
    with pytest.raises(Escape) as caught:
        resolve_beneath(root, "d/../..")
    assert caught.value.link is None
