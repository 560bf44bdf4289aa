"""MCP servers as tools, through the official ``mcp`` SDK (stdio and streamable HTTP).

Servers come from a JSON file (``--mcp FILE``, else ``$BUBU_HOME/mcp.json`` when it exists)::

    {"servers": {
        "notes": {"command": ["python", "notes_server.py"], "env": {"TOKEN": "${NOTES_TOKEN}"},
                  "trusted": true},
        "tracker": {"url": "http://127.0.0.1:8123/mcp", "headers": {"Authorization": "Bearer ${T}"}}
    }}

``command`` is a list (or a string plus ``args``, as other MCP hosts write it); ``$VAR`` in
``env`` and ``headers`` values is taken from the environment, so secrets stay out of the file.
Each tool of server S is offered to the model as ``S__tool``. Its effect class is ``read_only``
only when the tool declares ``readOnlyHint`` *and* the user marked S ``"trusted": true`` — only
then is it re-run silently after a crash; every other MCP tool is ``side_effecting`` (never
re-run; an explicit "interrupted" result). A call of a side-effecting MCP tool asks the user's
permission unless the server says ``"ask": false``.

The engine runs tools in worker threads; the MCP client sessions live on one asyncio loop in a
background thread, and each call is submitted to it. The server's stderr goes to a temporary file,
whose end is quoted when the server fails to start.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures as cf
import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import msgspec

from bubu import secrets
from bubu.errors import ConfigError, ToolError
from bubu.events import EffectClass
from bubu.mcppath import default_config_path
from bubu.tools import mcpprocs, mcpstdout, proctree
from bubu.tools.base import JSON, ToolContext, ToolResult, WriteIntent

if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import CallToolResult

T = TypeVar("T")

SERVER_NAME = re.compile(r"^[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*$")
"""A server name: letters, digits, '-' and single '_' (the double underscore separates the tool)."""

STARTUP_TIMEOUT_S = 30.0


class ServerConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One MCP server: a command to run (stdio) or a URL (streamable HTTP)."""

    command: list[str] | str | None = None
    args: list[str] = msgspec.field(default_factory=list)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    trusted: bool = False
    ask: bool = True

    @property
    def argv(self) -> list[str]:
        """The command line of a stdio server."""
        cmd = [self.command] if isinstance(self.command, str) else list(self.command or [])
        return [*cmd, *self.args]


class MCPConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The MCP configuration file: servers by name (``mcpServers`` is accepted as well)."""

    servers: dict[str, ServerConfig] = msgspec.field(default_factory=dict)
    mcpServers: dict[str, ServerConfig] = msgspec.field(
        default_factory=dict
    )  # the key other hosts use

    def all(self) -> dict[str, ServerConfig]:
        """Every server, whichever key named it."""
        return {**self.mcpServers, **self.servers}


def startup_timeout() -> float:
    """Seconds an MCP server has to answer `initialize` and list its tools."""
    raw = os.environ.get("BUBU_MCP_STARTUP_TIMEOUT")
    if not raw:
        return STARTUP_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise ConfigError(
            f"BUBU_MCP_STARTUP_TIMEOUT takes a number of seconds from 0 to 3600, got {raw!r}"
        )
    return value


def parse_config(data: bytes, where: str) -> MCPConfig:
    """Parse and check a configuration; a mistake is a ConfigError naming `where`."""
    try:
        config = msgspec.json.decode(data, type=MCPConfig)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ConfigError(f"the MCP configuration {where} is not valid: {e}") from e
    for name, server in config.all().items():
        if not SERVER_NAME.match(name) or len(name) > 32:
            raise ConfigError(
                f"the MCP server name {name!r} in {where} must be 1-32 letters, digits, '-' or "
                "single '_'; rename it"
            )
        if (server.url is None) == (not server.argv):
            raise ConfigError(
                f"the MCP server {name!r} in {where} needs exactly one of command (stdio) or url "
                "(streamable HTTP)"
            )
    return config


def load_config(path: str | Path) -> MCPConfig:
    """Read and check the configuration file at `path`."""
    p = Path(path).expanduser()
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read the MCP configuration {p}: {e.strerror}") from e
    return parse_config(data, str(p))


def tool_name(server: str, tool: str) -> str:
    """The name the model sees: ``server__tool``, in the characters providers accept (≤ 64)."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", f"{server}__{tool}")
    if len(name) > 64:
        name = name[:55] + "_" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return name


def _leaf(e: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups from anyio task groups."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return e


_REF = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
_AUTH_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})


def _expand(values: Mapping[str, str], *, server: str | None = None) -> dict[str, str]:
    """`$VAR` expanded in each value. For `server`'s headers, every variable they expand and the
    credential an auth header holds are secrets, kept out of the log like the environment's."""
    out = {k: os.path.expandvars(v) for k, v in values.items()}
    if server is not None:
        for key, template in values.items():
            for m in _REF.finditer(template):
                name = m.group(1) or m.group(2)
                secrets.register(name, os.environ.get(name))
            words = out[key].split()
            if words and (
                key.lower() in _AUTH_HEADERS or secrets.is_secret_name(key.replace("-", "_"))
            ):
                label = re.sub(r"\W", "_", f"mcp_{server}_{key}").upper()
                secrets.register(label, words[-1])
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class _Listed:
    name: str
    description: str
    schema: dict[str, JSON]
    read_only: bool


class MCPServers:
    """Connections to the configured servers, on one asyncio loop in a background thread."""

    def __init__(
        self,
        config: MCPConfig,
        *,
        where: str = "the MCP configuration",
        pass_env: Sequence[str] = (),
    ) -> None:
        self.config = config
        self.where = where
        self.pass_env = tuple(pass_env)
        """Secret variables passed on to stdio servers by name (``--env``)."""
        self._servers = config.all()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._clients: dict[str, Client] = {}
        self._listed: dict[str, list[_Listed]] = {}
        self._serving: list[cf.Future[None]] = []
        self._logs: dict[str, IO[str]] = {}
        self._refused: set[str] = set()
        """Remote servers that answered 401 (Unauthorized): they want a sign-in."""

    def __enter__(self) -> MCPServers:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self, timeout_s: float | None = None) -> None:
        """Connect to every server and list its tools; ConfigError (all closed) if one fails.
        `timeout_s`: how long a server has to answer (default `BUBU_MCP_STARTUP_TIMEOUT`, else
        STARTUP_TIMEOUT_S)."""
        if self._loop is not None or not self._servers:
            return
        if timeout_s is None:
            timeout_s = startup_timeout()
        try:
            import mcp  # noqa: F401  # the SDK is an optional dependency
        except ImportError as e:
            from bubu.extras import install_hint

            raise ConfigError(
                f"{self.where} lists MCP servers, but the mcp package is not installed; "
                f"{install_hint('mcp')}"
            ) from e
        mcpprocs.install()
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="bubu-mcp", daemon=True)
        self._thread.start()
        self._stop = self._submit(_make_event()).result()
        ready: dict[str, cf.Future[list[_Listed]]] = {}
        for name, server in self._servers.items():
            ready[name] = cf.Future()
            self._serving.append(self._submit(self._serve(name, server, ready[name])))
        try:
            for name, fut in ready.items():
                try:
                    self._listed[name] = fut.result(timeout=timeout_s)
                except mcpstdout.NotJsonRpc as e:
                    # A server that talks past the protocol is left out; the run goes on.
                    mcpstdout.warn(
                        f"the MCP server {name!r} wrote text that is not JSON-RPC to its stdout "
                        f"({e}); its tools are unavailable in this run; fix it in {self.where}"
                    )
                except cf.TimeoutError:
                    raise ConfigError(
                        f"the MCP server {name!r} did not answer within {timeout_s:.0f} s; "
                        f"check it in {self.where}{self._stderr_tail(name)}"
                    ) from None
                except Exception as e:  # the SDK wraps its errors in groups
                    if isinstance(_leaf(e), ConfigError):
                        raise _leaf(e) from e
                    raise ConfigError(
                        f"the MCP server {name!r} could not be started "
                        f"({type(_leaf(e)).__name__}: {_leaf(e)}); check it in "
                        f"{self.where}{self._stderr_tail(name)}{self._sign_in(name)}"
                    ) from e
        except BaseException:  # undone, then re-raised: Ctrl-C and exits too
            self.close()
            raise

    def close(self) -> None:
        """Disconnect every server (stdio servers are stopped) and end the loop thread."""
        loop, thread, stop = self._loop, self._thread, self._stop
        if loop is None:
            return
        self._loop = None
        if stop is not None:
            loop.call_soon_threadsafe(stop.set)
        # A server still starting (one that never answered `initialize`) waits for no stop
        # event: its connection is cancelled. The SDK bounds its own shutdown waits (a few
        # seconds for a stuck stdio server); what is left of any server is killed by group.
        for name, fut in zip(self._servers, self._serving, strict=False):
            if name not in self._clients:
                fut.cancel()
        cf.wait(self._serving, timeout=15)
        mcpprocs.kill({f"{id(self)}:{name}" for name in self._servers})
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=5)
        if not loop.is_running():
            loop.close()
        for log in self._logs.values():
            log.close()
        self._logs.clear()
        self._clients.clear()

    def _submit(self, coro: Coroutine[Any, Any, T]) -> cf.Future[T]:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _target(self, name: str, server: ServerConfig, stack: contextlib.AsyncExitStack) -> Any:
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client
        from mcp.client.streamable_http import streamable_http_client

        if server.url is not None:
            import httpx2

            from bubu.tools.mcpauth import connection_auth

            http = httpx2.AsyncClient(
                headers=_expand(server.headers, server=name),
                timeout=httpx2.Timeout(30.0, read=300.0),
                auth=connection_auth(name, server.url),  # `bubu mcp login NAME`, if signed in
                event_hooks={"response": [self._watch_status(name)]},
            )
            stack.push_async_callback(http.aclose)
            return streamable_http_client(server.url, http_client=http)
        argv = server.argv
        log = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115  # closed in close()
        self._logs[name] = log
        # The SDK adds only a few harmless variables (PATH, HOME …) to this: a server sees the
        # secrets its own `env` names and those passed on with --env, no others.
        env = {**secrets.passed_on(self.pass_env), **_expand(server.env)}
        argv = _held(argv, env, server.cwd)
        params = StdioServerParameters(
            command=argv[0], args=argv[1:], env=env or None, cwd=server.cwd
        )
        return stdio_client(params, errlog=log)

    async def _serve(
        self, name: str, server: ServerConfig, ready: cf.Future[list[_Listed]]
    ) -> None:
        """Hold one connection open until close(): the SDK's task groups must be entered and
        left by the same task."""
        from mcp import Client

        task = asyncio.current_task()
        warned = False

        def not_json(line: str) -> None:
            nonlocal warned
            if not ready.done():
                ready.set_exception(mcpstdout.NotJsonRpc(f"first: {line!r}"))
                if task is not None:
                    task.cancel()  # ends the connection and stops the server
            elif not warned:
                warned = True
                mcpstdout.warn(
                    f"the MCP server {name!r} wrote text that is not JSON-RPC to its stdout "
                    f"({line!r}); ignored"
                )

        mcpstdout.watch(name, not_json)
        mcpprocs.naming(f"{id(self)}:{name}")
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = await stack.enter_async_context(
                    Client(self._target(name, server, stack), cache=None)
                )
                listed = await _list_tools(client)
                self._clients[name] = client
                ready.set_result(listed)
                assert self._stop is not None
                await self._stop.wait()
        except BaseException as e:  # handed to the waiting caller
            if not ready.done():
                ready.set_exception(e if isinstance(e, Exception) else RuntimeError(str(e)))
            if not isinstance(e, Exception):
                raise
        finally:
            mcpstdout.unwatch(name)
            self._clients.pop(name, None)

    def _watch_status(self, name: str) -> Any:
        async def hook(response: Any) -> None:
            if response.status_code == 401:
                self._refused.add(name)

        return hook

    def _sign_in(self, name: str) -> str:
        """A hint to sign in, when the server refused the connection as unauthorized."""
        if name not in self._refused:
            return ""
        return f"; it asks for a sign-in: run `bubu mcp login {name}`"

    def _stderr_tail(self, name: str) -> str:
        log = self._logs.get(name)
        if log is None:
            return ""
        with contextlib.suppress(OSError, ValueError):
            log.flush()
            log.seek(0)
            text = log.read()[-600:].strip()
            if text:
                return f"; its stderr ends with: {text}"
        return ""

    # -- tools ------------------------------------------------------------------------------------

    def tools(self) -> list[MCPTool]:
        """An adapter for every tool of every server (start() first)."""
        out: list[MCPTool] = []
        seen: dict[str, str] = {}
        for server, listed in self._listed.items():
            cfg = self._servers[server]
            for t in listed:
                name = tool_name(server, t.name)
                if name in seen:
                    raise ConfigError(
                        f"the MCP tools {seen[name]} and {server}/{t.name} both become {name!r}; "
                        f"rename one of the servers in {self.where}"
                    )
                seen[name] = f"{server}/{t.name}"
                effect: EffectClass = (
                    "read_only" if t.read_only and cfg.trusted else "side_effecting"
                )
                out.append(
                    MCPTool(
                        name=name,
                        description=f"(MCP server {server}) {t.description}".strip(),
                        parameters=t.schema,
                        effect=effect,
                        server=server,
                        remote=t.name,
                        ask=cfg.ask,
                        servers=self,
                    )
                )
        return out

    def call(self, server: str, tool: str, args: dict[str, JSON], ctx: ToolContext) -> ToolResult:
        """Call `tool` on `server`, honouring the context's timeout and cancel event."""
        client = self._clients.get(server)
        if client is None or self._loop is None:
            return ToolResult(
                output=f"the MCP server {server!r} is not connected (it stopped or failed); "
                "the tool did not run",
                is_error=True,
            )
        fut = self._submit(client.call_tool(tool, args, read_timeout_seconds=ctx.timeout_s))
        waited = 0.0
        while True:
            try:
                result = fut.result(timeout=0.1)
                break
            except cf.TimeoutError:
                waited += 0.1
                if ctx.cancel.is_set() or waited > ctx.timeout_s + 5:
                    fut.cancel()
                    why = (
                        f"was {ctx.stopped_by()}"
                        if ctx.cancel.is_set()
                        else f"timed out after {ctx.timeout_s:g} s"
                    )
                    return ToolResult(output=f"{server}/{tool} {why}", is_error=True)
            except cf.CancelledError:
                return ToolResult(
                    output=f"{server}/{tool} was cut off: the connection closed", is_error=True
                )
            except Exception as e:  # the server's failure is a result the model sees
                leaf = _leaf(e)
                return ToolResult(
                    output=f"the MCP server {server!r} failed: {type(leaf).__name__}: {leaf}",
                    is_error=True,
                )
        return ToolResult(output=result_text(result), is_error=bool(result.is_error))


async def _make_event() -> asyncio.Event:
    return asyncio.Event()


async def _list_tools(client: Client) -> list[_Listed]:
    out: list[_Listed] = []
    cursor: str | None = None
    for _ in range(100):  # a paginator that never ends cannot hang start-up
        page = await client.list_tools(cursor=cursor)
        for t in page.tools:
            schema = dict(t.input_schema or {})
            schema.setdefault("type", "object")
            schema.setdefault("properties", {})
            hints = t.annotations
            out.append(
                _Listed(
                    name=t.name,
                    description=t.description or (hints.title if hints and hints.title else ""),
                    schema=schema,
                    read_only=bool(hints is not None and hints.read_only_hint),
                )
            )
        cursor = page.next_cursor
        if cursor is None:
            break
    return out


def result_text(result: CallToolResult) -> str:
    """The text the model sees of a CallToolResult: its text blocks, with other blocks described."""
    from mcp.types import AudioContent, EmbeddedResource, ImageContent, ResourceLink, TextContent

    parts: list[str] = []
    for block in result.content:
        match block:
            case TextContent():
                parts.append(block.text)
            case ImageContent() | AudioContent():
                size = len(block.data) * 3 // 4  # base64
                parts.append(f"[{block.type} {block.mime_type}, {size:,} bytes]")
            case EmbeddedResource():
                text = getattr(block.resource, "text", None)
                parts.append(text if text is not None else f"[resource {block.resource.uri}]")
            case ResourceLink():
                parts.append(f"[resource {block.uri}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n".join(parts)


@dataclass(eq=False, kw_only=True)
class MCPTool:
    """One tool of an MCP server, behind Bubu's Tool protocol."""

    name: str
    description: str
    parameters: dict[str, JSON]
    effect: EffectClass
    server: str
    remote: str
    ask: bool
    servers: MCPServers

    def permission(self, args: dict[str, JSON], ctx: ToolContext) -> str | None:
        """A side-effecting MCP tool asks, unless its server says ``"ask": false``."""
        if self.effect == "read_only" or not self.ask:
            return None
        return f"{self.remote} is a tool of the MCP server {self.server!r} and may change things"

    def prepare(self, args: dict[str, JSON], ctx: ToolContext) -> WriteIntent | None:
        """MCP tools are never provable writes."""
        return None

    def run(
        self, args: dict[str, JSON], ctx: ToolContext, intent: WriteIntent | None
    ) -> ToolResult:
        """Call the tool on its server."""
        if not isinstance(args, dict):
            raise ToolError("the arguments must be a JSON object")
        return self.servers.call(self.server, self.remote, args, ctx)


# ---- for the command line -----------------------------------------------------------------------

_open: dict[str, MCPServers] = {}
_open_lock = threading.Lock()


def _held(argv: Sequence[str], env: Mapping[str, str], cwd: str | Path | None) -> list[str]:
    """A stdio server's command line under a keeper that kills the server's tree when Bubu dies,
    a SIGKILL included (`keeper.serve`). A command that cannot be found is left as it is, so
    that starting it fails as plainly as before."""
    where = env.get("PATH") or os.environ.get("PATH")
    command = argv[0]
    if "/" in command and cwd is not None and not os.path.isabs(command):
        command = os.path.join(str(cwd), command)
    if shutil.which(command, path=where) is None:
        return list(argv)
    return proctree.server_argv(argv)


def connect(path: str | Path | None = None, pass_env: Sequence[str] = ()) -> list[MCPTool]:
    """The tools of the servers in `path` (default `default_config_path`, none if absent),
    connected once per process and closed when it exits; for the CLI's hosts. `pass_env`: secret
    variables passed on to the servers by name."""
    chosen = Path(path).expanduser() if path is not None else default_config_path()
    if chosen is None:
        return []
    key = str(chosen.resolve()) + "\0" + ",".join(sorted(pass_env))
    with _open_lock:
        servers = _open.get(key)
        if servers is None:
            servers = MCPServers(load_config(chosen), where=str(chosen), pass_env=pass_env)
            servers.start()
            _open[key] = servers
    return servers.tools()


def disconnect_all() -> None:
    """Close every connection `connect` opened (also done when the process exits)."""
    with _open_lock:
        for servers in _open.values():
            servers.close()
        _open.clear()


atexit.register(disconnect_all)
atexit.register(mcpprocs.kill)


__all__ = [
    "MCPConfig",
    "MCPServers",
    "MCPTool",
    "ServerConfig",
    "connect",
    "default_config_path",
    "disconnect_all",
    "load_config",
    "parse_config",
    "result_text",
    "tool_name",
]
