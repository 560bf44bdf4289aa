"""CPU from process start to the first model request of `bubu run`, per provider.

A local HTTP server answers the Anthropic Messages and the OpenAI Chat Completions streaming
endpoints with the wire fixtures of tests/providers; `bubu run -m anthropic:… --base-url` (and
`openai:…`) runs in a child process, and the moment the server reads the child's first request it
takes the child's user + sys CPU from /proc/PID/stat. `python -c pass` is the floor. `--src DIR`
(repeatable) times another tree (e.g. the code before a change) in the same rounds. Bytecode
caching is on, as in an installed Bubu, even where PYTHONDONTWRITEBYTECODE is set.

Usage: python bench/first_request.py [--runs 5] [--src DIR ...]. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
OWN_SRC = HERE.parent / "src"


def installed_env(cache: Path) -> dict[str, str]:
    """The environment with bytecode caching on, as in an installed Bubu (pip compiles on
    install): the caches go to `cache`, written by the first round, which is not counted."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": str(cache)}


FIXTURES = HERE.parent / "tests" / "providers" / "fixtures"
ROUTES = {"/v1/messages": "anthropic_text.sse", "/v1/chat/completions": "openai_text.sse"}
MODELS = {"anthropic": "anthropic:claude-haiku-4-5", "openai": "openai:gpt-4.1-mini"}
TICK = os.sysconf("SC_CLK_TCK")


def cpu_of_pid(pid: int) -> float:
    """User + sys CPU seconds of a running process, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Server(ThreadingHTTPServer):
    """Answers each route with its fixture and notes the CPU of `child` at its first request."""

    child: int = 0
    first_cpu: float | None = None

    def watch(self, pid: int) -> None:
        """Note the CPU of `pid` at the next request (0: of no process)."""
        self.child, self.first_cpu = pid, None


class Handler(BaseHTTPRequestHandler):
    server: Server

    def do_POST(self) -> None:  # the name http.server calls
        if self.server.first_cpu is None and self.server.child:
            self.server.first_cpu = cpu_of_pid(self.server.child)
        self.rfile.read(int(self.headers.get("content-length") or 0))
        name = ROUTES.get(self.path.split("?")[0])
        body = (FIXTURES / name).read_bytes() if name else b'{"error": "not found"}'
        self.send_response(200 if name else 404)
        self.send_header("content-type", "text/event-stream" if name else "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


def first_request(server: Server, provider: str, src: Path, work: Path, cache: Path) -> float:
    """CPU seconds of one `bubu run` until its first model request reached `server`."""
    port = server.server_address[1]
    base = f"http://127.0.0.1:{port}" + ("/v1" if provider == "openai" else "")
    env = {
        **installed_env(cache),
        "PYTHONPATH": str(src),
        "BUBU_HOME": str(work / "home"),
        "ANTHROPIC_API_KEY": "sk-ant-bench",
        "OPENAI_API_KEY": "sk-bench",
    }
    db = work / f"bench-{abs(hash(str(src)))}.db"  # each tree its own: a newer one may migrate
    argv = [
        sys.executable,
        "-m",
        "bubu",
        "--db",
        str(db),
        "run",
        "say hello",
        "-m",
        MODELS[provider],
        "--base-url",
        base,
        "--yes",
    ]
    proc = subprocess.Popen(
        argv, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    server.watch(proc.pid)
    _, err = proc.communicate(timeout=120)
    server.child = 0
    if server.first_cpu is None:
        raise SystemExit(f"{provider}: no request reached the server: {err.decode()[-2000:]}")
    return server.first_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--src", action="append", default=[], help="Another tree's src to time.")
    args = parser.parse_args()
    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    trees = {"this": OWN_SRC, **{f"src{i}": Path(s) for i, s in enumerate(args.src)}}
    times: dict[str, list[float]] = {"python -c pass": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cache = work / "pycache"
        for n in range(args.runs + 1):  # the first round writes the bytecode caches
            proc = subprocess.Popen([sys.executable, "-c", "pass"], env=installed_env(cache))
            usage = os.wait4(proc.pid, 0)[2]
            if n:
                times["python -c pass"].append(usage.ru_utime + usage.ru_stime)
            for tree, src in trees.items():
                for provider in MODELS:
                    cpu = first_request(server, provider, src, work, cache)
                    if n:
                        times.setdefault(f"{tree}: {provider}", []).append(cpu)
    server.shutdown()
    medians = {k: round(statistics.median(v) * 1000) for k, v in times.items()}
    least = {k: round(min(v) * 1000) for k, v in times.items()}  # the least disturbed round
    for key, ms in medians.items():
        print(f"{key:<18} {ms:6d} ms CPU to the first request (median), {least[key]:6d} ms (min)")
    print(
        json.dumps(
            {
                "runs": args.runs,
                "median_cpu_ms": medians,
                "min_cpu_ms": least,
                "trees": {k: str(v) for k, v in trees.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
