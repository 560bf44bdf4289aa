"""CPU per read step of `bubu run` against an instant local model server, over real HTTP.

A local HTTP server speaks the OpenAI Chat Completions streaming wire (`--provider openai`) or the
Anthropic Messages one (`--provider anthropic`): to each of the first N requests it answers at
once with one `read_file` call of a small file of the workspace (a different file each step, so no
two calls repeat), and then with a final text. At each request it reads the child's user + sys CPU
from /proc/PID/stat; the CPU per step is what the child spent from its second request to its last,
divided by the steps in between: reading the streamed answer, committing it, running the read,
committing the outcome, building and sending the next request. `--src DIR` (repeatable) times
another tree (e.g. the code before a change) in the same rounds, alternating with this one.

Usage: python bench/http_step.py [--steps 200] [--rounds 3] [--provider openai] [--src DIR ...]
Last line: one JSON object.
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
TICK = os.sysconf("SC_CLK_TCK")
MODELS = {"anthropic": "anthropic:claude-haiku-4-5", "openai": "openai:gpt-4.1-mini"}


def installed_env(cache: Path) -> dict[str, str]:
    """Bytecode caching on, as in an installed Bubu; the caches go to `cache`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPYCACHEPREFIX": str(cache)}


def cpu_of_pid(pid: int) -> float:
    """User + sys CPU seconds of a running process, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _sse(chunks: list[dict[str, object]], done: bool) -> bytes:
    out = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    return out + (b"data: [DONE]\n\n" if done else b"")


def openai_answer(n: int, steps: int) -> bytes:
    """Chat Completions stream: a `read_file` call for step `n`, or the final text."""
    head = {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion.chunk",
        "created": 1764586800,
        "model": "gpt-4.1-mini",
    }
    if n <= steps:
        delta: dict[str, object] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "index": 0,
                    "id": f"call_{n}",
                    "type": "function",
                    "function": {
                        "name": "read_file",
                        "arguments": json.dumps({"path": f"f{n}.txt"}),
                    },
                }
            ],
        }
        finish = "tool_calls"
    else:
        delta, finish = {"role": "assistant", "content": "Done."}, "stop"
    usage = {"prompt_tokens": 1000 + 40 * n, "completion_tokens": 12, "total_tokens": 1012 + 40 * n}
    return _sse(
        [
            {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
            {**head, "choices": [], "usage": usage},
        ],
        done=True,
    )


def anthropic_answer(n: int, steps: int) -> bytes:
    """Messages stream: a `read_file` tool use for step `n`, or the final text."""

    def ev(name: str, data: dict[str, object]) -> bytes:
        return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()

    usage = {"input_tokens": 1000 + 40 * n, "output_tokens": 12}
    out = ev(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": f"msg_{n}",
                "type": "message",
                "role": "assistant",
                "model": "claude-haiku-4-5",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage,
            },
        },
    )
    if n <= steps:
        block = {"type": "tool_use", "id": f"toolu_{n}", "name": "read_file", "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps({"path": f"f{n}.txt"})}
        stop = "tool_use"
    else:
        block, delta, stop = (
            {"type": "text", "text": ""},
            {"type": "text_delta", "text": "Done."},
            "end_turn",
        )
    out += ev(
        "content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}
    )
    out += ev("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
    out += ev("content_block_stop", {"type": "content_block_stop", "index": 0})
    out += ev(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 12},
        },
    )
    return out + ev("message_stop", {"type": "message_stop"})


class Server(ThreadingHTTPServer):
    """Answers the script and notes the child's CPU at each request."""

    child = 0
    steps = 0
    cpu: list[float]

    def watch(self, pid: int, steps: int) -> None:
        self.child, self.steps, self.cpu = pid, steps, []


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"  # keep-alive, as a hosted API
    wbufsize = 1 << 16  # the head and the body in one write (no wait for a delayed ACK)

    def do_POST(self) -> None:  # the name http.server calls
        self.rfile.read(int(self.headers.get("content-length") or 0))
        srv = self.server
        if srv.child:
            srv.cpu.append(cpu_of_pid(srv.child))
        n = len(srv.cpu)
        if self.path.split("?")[0].endswith("/messages"):
            body = anthropic_answer(n, srv.steps)
        else:
            body = openai_answer(n, srv.steps)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


def run_once(server: Server, provider: str, src: Path, work: Path, steps: int) -> float:
    """CPU seconds per step of one `bubu run` of `steps` read steps."""
    port = server.server_address[1]
    base = f"http://127.0.0.1:{port}" + ("/v1" if provider == "openai" else "")
    ws = work / f"ws-{abs(hash(str(src)))}"
    ws.mkdir(exist_ok=True)
    for i in range(1, steps + 1):
        (ws / f"f{i}.txt").write_text(f"line {i} of a small file\n" * 5)
    env = {
        **installed_env(work / "pycache"),
        "PYTHONPATH": str(src),
        "BUBU_HOME": str(work / "home"),
        "ANTHROPIC_API_KEY": "sk-ant-bench",
        "OPENAI_API_KEY": "sk-bench",
    }
    db = ws / "bench.db"
    db.unlink(missing_ok=True)
    argv = [
        sys.executable,
        "-m",
        "bubu",
        "--db",
        str(db),
        "run",
        "read the files",
        "-m",
        MODELS[provider],
        "--base-url",
        base,
        "--yes",
        "--max-steps",
        str(steps + 5),
    ]
    proc = subprocess.Popen(
        argv, env=env, cwd=ws, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    server.watch(proc.pid, steps)
    _, err = proc.communicate(timeout=600)
    cpu, server.child = server.cpu, 0
    if len(cpu) != steps + 1:
        raise SystemExit(f"{len(cpu)} requests of {steps + 1}: {err.decode()[-2000:]}")
    return (cpu[-1] - cpu[1]) / (steps - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--provider", choices=sorted(MODELS), default="openai")
    parser.add_argument("--src", action="append", default=[], help="Another tree's src to time.")
    args = parser.parse_args()
    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    trees = {"this": OWN_SRC, **{f"src{i}": Path(s) for i, s in enumerate(args.src)}}
    times: dict[str, list[float]] = {k: [] for k in trees}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for src in trees.values():  # a first short run writes the bytecode caches
            run_once(server, args.provider, src, work, 3)
        for r in range(args.rounds):
            order = list(trees.items()) if r % 2 == 0 else list(reversed(trees.items()))
            for tree, src in order:
                times[tree].append(run_once(server, args.provider, src, work, args.steps))
    server.shutdown()
    medians = {k: round(statistics.median(v) * 1000, 2) for k, v in times.items()}
    for key, ms in medians.items():
        rounds = ", ".join(f"{t * 1000:.2f}" for t in times[key])
        print(f"{key}: {ms:.2f} ms CPU per read step (median; rounds {rounds})")
    print(
        json.dumps(
            {
                "provider": args.provider,
                "steps": args.steps,
                "rounds": args.rounds,
                "median_cpu_ms_per_step": medians,
                "trees": {k: str(v) for k, v in trees.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
