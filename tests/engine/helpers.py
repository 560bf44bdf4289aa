"""Helpers for the engine tests: scripts, hosts and what a turn appended.

The engine runs in-process against a real SQLite file; the model is the scripted provider (a JSONL
file) or, where a script cannot say it (arguments that are not JSON), a `FunctionProvider`.
`Recording` wraps any provider and keeps every request, so a test can check what the model saw.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bubu.engine.driver import RunConfig
from bubu.engine.permissions import Asker, Policy, nobody
from bubu.engine.session import Host
from bubu.events import (
    FunctionCall,
    FunctionResponse,
    Record,
    SystemNote,
    ToolDispatch,
    TurnEnded,
    kind_of,
)
from bubu.log.store import Store
from bubu.providers.base import (
    DeltaSink,
    ModelRequest,
    ModelResponse,
    Provider,
    ToolResultsMessage,
)
from bubu.providers.function import FunctionProvider
from bubu.providers.scripted import ScriptedProvider
from bubu.tools import builtin_tools

Line = Mapping[str, object]
"""One line of a scripted model file (DESIGN §9)."""

FAST = RunConfig(backoff_s=0.001, backoff_max_s=0.01, tool_timeout_s=60.0)
"""A run configuration whose retries do not wait."""


def call(name: str, **arguments: object) -> dict[str, object]:
    """A scripted tool call."""
    return {"name": name, "arguments": arguments}


def write_script(path: Path, lines: Iterable[Line]) -> Path:
    """Write a scripted model file, one JSON object per line."""
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@dataclass
class Recording:
    """A provider that remembers every request before passing it on."""

    inner: Provider
    requests: list[ModelRequest] = field(default_factory=list)

    @property
    def spec(self) -> str:
        """The wrapped provider's spec."""
        return self.inner.spec

    @property
    def context_window(self) -> int:
        """The wrapped provider's window."""
        return self.inner.context_window

    def complete(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """Record the request, then answer as the wrapped provider does."""
        self.requests.append(request)
        return self.inner.complete(request, on_delta)


def canned(responses: Sequence[ModelResponse]) -> FunctionProvider:
    """A model answering request N with `responses[N]` (for responses a script cannot hold)."""
    return FunctionProvider(lambda request: responses[request.ordinal], spec="canned:test")


def scripted(path: Path) -> Recording:
    """The scripted provider over `path`, recording its requests."""
    return Recording(ScriptedProvider(str(path)))


def make_host(
    store: Store,
    provider: Provider,
    *,
    policy: Policy | None = None,
    asker: Asker = nobody,
    config: RunConfig = FAST,
) -> Host:
    """A host with the built-in tools."""
    return Host(
        store=store,
        provider=provider,
        tools=builtin_tools(),
        policy=policy or Policy(),
        asker=asker,
        config=config,
    )


def kinds(records: Iterable[Record]) -> list[str]:
    """The kind label of each record, in order."""
    return [kind_of(r.event) for r in records]


def outcomes(records: Iterable[Record]) -> dict[str, list[tuple[int, FunctionResponse]]]:
    """Every function_response by call id, with its seq."""
    out: dict[str, list[tuple[int, FunctionResponse]]] = {}
    for r in records:
        c = r.event.content
        if isinstance(c, FunctionResponse):
            out.setdefault(c.call_id, []).append((r.seq, c))
    return out


def calls(records: Iterable[Record]) -> list[tuple[int, FunctionCall]]:
    """Every function_call, with its seq."""
    return [(r.seq, c) for r in records if isinstance(c := r.event.content, FunctionCall)]


def dispatches(records: Iterable[Record]) -> dict[str, tuple[int, ToolDispatch]]:
    """Every tool_dispatch by call id, with its seq."""
    out: dict[str, tuple[int, ToolDispatch]] = {}
    for r in records:
        a = r.event.actions
        if a is not None and a.tool_dispatch is not None:
            out[a.tool_dispatch.call_id] = (r.seq, a.tool_dispatch)
    return out


def turn_end(records: Sequence[Record]) -> TurnEnded:
    """The last turn_ended note."""
    for r in reversed(records):
        c = r.event.content
        if isinstance(c, SystemNote) and isinstance(c.note, TurnEnded):
            return c.note
    raise AssertionError("no turn_ended in the log")


def results_of(request: ModelRequest) -> list[ToolResultsMessage]:
    """The tool-result messages of a request."""
    return [m for m in request.messages if isinstance(m, ToolResultsMessage)]


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    """Poll until `predicate` holds; fail naming `what` if it never does (a hang, not a timing)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


def process_alive(pid: int) -> bool:
    """True when `pid` is a running (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return stat[stat.rfind(b")") + 2 :][:1] not in (b"Z", b"X")
