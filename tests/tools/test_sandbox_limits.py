"""The sandbox's limits, for real: a command forks past its process limit, allocates past its
memory limit and writes past its file-size limit inside a real sandbox, and is refused; the
result says which limit was hit where the kernel tells. The flags and config keys set them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from bubu.tools import ToolContext, ToolResult, limits
from bubu.tools.base import Tool
from bubu.tools.limits import Limits
from bubu.tools.sandbox import Options, Sandbox, confinement
from engine.cli import bubu
from engine.helpers import call, write_script

CGROUP = limits.cgroup_for(Limits())
if CGROUP is not None:
    CGROUP.remove()
needs_binding_procs = pytest.mark.skipif(
    (CGROUP is None or CGROUP.pids is None) and os.getuid() == 0,
    reason="as root only a pids cgroup binds a process count, and none can be made here",
)

FORK = f"""{sys.executable} -c '
import os, signal, time
kids = []
try:
    for _ in range(300):
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        kids.append(pid)
    print("forked all", len(kids))
except OSError as e:
    print("refused after", len(kids), e.strerror)
for k in kids:
    os.kill(k, signal.SIGKILL)
'"""

ALLOCATE = f"""{sys.executable} -c '
try:
    block = bytearray(400 << 20)
    print("allocated", len(block))
except MemoryError:
    print("MemoryError")
'"""


def box(**limit: int) -> Sandbox:
    sandbox = confinement("workspace-write", False, options=Options(limits=Limits(**limit)))
    assert sandbox is not None
    return sandbox


def run(tools: dict[str, Tool], ws: Path, sandbox: Sandbox | None, command: str) -> str:
    ctx = ToolContext(workspace=ws, timeout_s=120.0, sandbox=sandbox)
    result: ToolResult = tools["run_command"].run({"command": command}, ctx, None)
    return result.output


@needs_binding_procs
def test_forking_past_the_process_limit_is_refused(tools: dict[str, Tool], ws: Path) -> None:
    assert run(tools, ws, None, FORK).startswith("forked all 300"), "unconfined it forks"
    out = run(tools, ws, box(procs=40), FORK)
    assert out.startswith("refused after "), out
    assert int(out.split()[2]) < 40, out
    if CGROUP is not None and CGROUP.pids is not None:
        assert "the process limit (40 processes and threads) was reached" in out, out


def test_allocating_past_the_memory_limit_is_refused(tools: dict[str, Tool], ws: Path) -> None:
    assert run(tools, ws, None, ALLOCATE).startswith("allocated"), "unconfined it allocates"
    out = run(tools, ws, box(memory=100 << 20), ALLOCATE)
    assert "allocated" not in out, out
    if CGROUP is not None and CGROUP.memory is not None:
        # The cgroup binds the whole tree; the kernel kills what goes past it, and says so.
        assert "the memory limit (100 MiB) was reached" in out, out
    else:
        assert "MemoryError" in out, out


def test_writing_past_the_file_size_limit_is_refused(tools: dict[str, Tool], ws: Path) -> None:
    out = run(tools, ws, box(file_size=1 << 20), "head -c 3000000 /dev/zero > big")
    assert (ws / "big").stat().st_size == 1 << 20
    assert "a file probably reached the file-size limit (1 MiB)" in out, out
    out = run(
        tools,
        ws,
        box(file_size=1 << 20),
        f'{sys.executable} -c \'open("big2", "wb").write(bytes(3 << 20))\'',
    )
    assert "File too large" in out, out


def test_defaults_a_test_suite_fits_in(tools: dict[str, Tool], ws: Path) -> None:
    assert run(tools, ws, box(), "ulimit -f") == f"{(4 << 30) // 1024}\nexit code 0"
    if CGROUP is None or CGROUP.pids is None:
        assert run(tools, ws, box(), "ulimit -u") == "1024\nexit code 0"
    assert Limits().memory_bytes() == limits.parse_size("50%", option="x", share=True)
    assert Limits().proc_count() == 1024


def test_sizes_parse_or_fail_in_one_sentence() -> None:
    assert limits.parse_size("512M", option="--max-file-size") == 512 << 20
    assert limits.parse_size("2GiB", option="--max-file-size") == 2 << 30
    assert limits.parse_size(" 4g ", option="--max-memory", share=True) == 4 << 30
    with pytest.raises(Exception, match=r"--max-file-size takes a size such as 1G or 500M"):
        limits.parse_size("50%", option="--max-file-size")
    with pytest.raises(Exception, match=r"--max-memory must be above 0 \(and at most 100%\)"):
        limits.parse_size("150%", option="--max-memory", share=True)
    with pytest.raises(Exception, match="--max-procs takes a whole number of processes above 0"):
        limits.parse_procs("many")


def _project(tmp_path: Path, command: str) -> tuple[Path, Path, Path]:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    script = write_script(
        tmp_path / "s.jsonl",
        [{"tool_calls": [call("run_command", command=command)]}, {"text": "done"}],
    )
    return tmp_path / "bubu.db", ws, script


def _refused_after(stdout: str) -> int:
    at = stdout.index("refused after ")
    return int(stdout[at:].split()[2])


@pytest.mark.heavy
@needs_binding_procs
def test_flags_and_config_keys_set_the_limits(tmp_path: Path) -> None:
    db, ws, script = _project(tmp_path, f"{FORK}; ulimit -f")
    run_args = ["run", "t", "-w", str(ws), "-m", f"scripted:{script}", "--jsonl"]
    done = bubu(db, *run_args, "--max-procs", "77", "--max-file-size", "1M")
    assert done.returncode == 0, done.stderr
    assert 60 < _refused_after(done.stdout) < 77, done.stdout
    assert "\\n1024\\nexit code 0" in done.stdout, done.stdout
    (tmp_path / "config.toml").write_text('max_procs = 66\nmax_file_size = "2M"\n')
    db.unlink()
    done = bubu(db, *run_args)
    assert done.returncode == 0, done.stderr
    assert 50 < _refused_after(done.stdout) < 66, done.stdout
    assert "\\n2048\\nexit code 0" in done.stdout, done.stdout
    # A workspace file may lower them, never raise them.
    (ws / ".bubu").mkdir()
    (ws / ".bubu" / "config.toml").write_text("max_procs = 40\n")
    db.unlink()
    done = bubu(db, *run_args)
    assert _refused_after(done.stdout) < 40, done.stdout
    # A raise is ignored, said once, and the user's 66 holds.
    (ws / ".bubu" / "config.toml").write_text("max_procs = 5000\n")
    db.unlink()
    done = bubu(db, *run_args)
    assert done.returncode == 0, done.stderr
    assert "ignored max_procs" in done.stderr, done.stderr
    assert 50 < _refused_after(done.stdout) < 66, done.stdout
    bad = bubu(db, *run_args, "--max-memory", "lots")
    assert bad.stderr == "bubu: error: --max-memory takes a size such as 50% or 4G, got 'lots'\n"
