"""The tool seam: what a tool declares and how the engine runs it.

A tool has a name, a description, a JSON schema for its arguments and an **effect class**, which
decides what recovery may do after a crash between dispatch and outcome (DESIGN §4):

- ``read_only``: re-run silently;
- ``provable_write``: `prepare` computes the target path and the file's hash before and after, so
  recovery can compare the file with them;
- ``side_effecting``: never re-run; an explicit "interrupted" result instead.

Running a tool never raises for an ordinary failure: it returns a `ToolResult` with
``is_error=True`` that the model sees. `ToolError` raised inside a tool is turned into such a
result.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from bubu.events import EffectClass
from bubu.tools.sandbox import Sandbox

if TYPE_CHECKING:
    from bubu.projections.memory import Note
    from bubu.tools.background import Processes

JSON: TypeAlias = Any


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResult:
    """What a tool produced: the text the model sees, and whether it is an error.

    `full` is the complete output when `output` had to be cut (a command's whole transcript):
    the engine offloads it to the blob table so no byte is lost and the model can page through it.
    """

    output: str
    is_error: bool = False
    full: bytes | None = None
    images: tuple[tuple[str, bytes], ...] = ()
    """Images (media type, bytes) shown to the model with `output`; the engine stores them as
    blobs."""
    dropped: int = 0
    """Bytes of the tool's output kept nowhere (neither in `output` nor in `full`)."""
    status: str | None = None
    """How the tool ended (a command's exit code), kept apart from `full`: an offloaded result
    is the output alone, so it reads as what the command printed (JSON, CSV, a log), and its
    placeholder ends with this line."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteIntent:
    """What a provable write will do: recorded in the dispatch before the write happens."""

    path: str
    before_sha256: str | None
    after_sha256: str
    content: bytes
    before: bytes | None = None
    """The file's content before (None: it did not exist, or the tool keeps none), kept in the
    blob store with the dispatch so that a rewind can put it back (`bubu.engine.keep`)."""


class Children(Protocol):
    """What the engine gives the sub-agent tools: start (or resume) a child session for a call,
    and merge a finished child's branch (`bubu.engine.children`)."""

    def delegate(self, call_id: str, args: dict[str, JSON]) -> ToolResult:
        """Run the child session of `call_id` to its end; its report is the result."""
        ...

    def merge(self, args: dict[str, JSON]) -> ToolResult:
        """Bring a finished child's changes into the workspace."""
        ...


@dataclass(slots=True, kw_only=True)
class ToolContext:
    """What a running tool may use.

    `workspace` is resolved; `outside_allowed` says the user allowed this call's path outside it,
    `allow_write` names the paths outside it the user allowed ahead of time (``--allow-write``);
    `cancel` is set when the run is stopped, and `stopped_by()` then says who stopped it, in
    words for the model ("stopped by the user", "stopped by an orderly shutdown" …); `blob` reads
    offloaded results by sha-256; `memory` reads the workspace's live notes (remember, recall).
    """

    workspace: Path
    timeout_s: float = 120.0
    cancel: threading.Event = field(default_factory=threading.Event)
    stopped_by: Callable[[], str] = lambda: "stopped by the user"
    outside_allowed: bool = False
    allow_write: tuple[str, ...] = ()
    """Absolute paths (a file, or a directory and what is below it) the file tools may write
    outside the workspace without asking (``--allow-write``)."""
    own_files: tuple[str, ...] = ()
    """Bubu's own files besides ``$BUBU_HOME`` (the log database), which no tool writes unasked."""
    blob: Callable[[str], bytes | None] | None = None
    sandbox: Sandbox | None = None
    """The operating-system sandbox commands run in (None: unconfined)."""
    pass_env: tuple[str, ...] = ()
    """Secret environment variables a command may see all the same (``--env NAME``)."""
    marker: str = ""
    """``session/run/call``: put in the environment of the processes the call starts
    (``BUBU_CALL``), so that recovery can find what a dead run left running."""
    memory: Callable[[], dict[str, Note]] | None = None
    images: bool = False
    """Whether the model is shown images (`read_file` returns an image, else says it is one)."""
    time_left_s: float | None = None
    """Seconds left before the turn's time limit (`--max-time`), when it has one: a command
    still running then is stopped, and its result says so."""
    time_limit: str = ""
    """The turn's time limit as a person wrote it (``5s``), for that result."""
    children: Children | None = None
    """Sub-agents (None: this host runs none)."""
    call_id: str = ""
    """The call's id in the log (a sub-agent's session is keyed by it)."""
    network: bool = False
    """Whether the turn may use the network (``--network``): web_fetch reaches any address."""
    web_domains: tuple[str, ...] = ()
    """The domains web_fetch may reach without the network permission (``web_domains``)."""
    processes: Processes | None = None
    """The session's background processes (None: background commands cannot run here)."""


class Tool(Protocol):
    """A tool the model can call."""

    name: str
    description: str
    parameters: dict[str, JSON]
    effect: EffectClass

    def permission(self, args: dict[str, JSON], ctx: ToolContext) -> str | None:
        """Why this call needs the user's permission, or None when policy allows it."""
        ...

    def prepare(self, args: dict[str, JSON], ctx: ToolContext) -> WriteIntent | None:
        """For a provable write, what it will write (raise ToolError if it cannot); else None."""
        ...

    def run(
        self, args: dict[str, JSON], ctx: ToolContext, intent: WriteIntent | None
    ) -> ToolResult:
        """Do the work. A provable write performs exactly `intent` (atomically)."""
        ...
