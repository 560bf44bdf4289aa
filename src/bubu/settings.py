"""Settings from config files: `$BUBU_HOME/config.toml`, a workspace's `.bubu/config.toml` and
their `[profiles.NAME]` tables, under the command line and the environment.

Precedence, highest first: flag > environment > the config files > default. The user's file
and the user's profile make the user's setting; a workspace file comes with the repository, so it
may only lower limits and tighten permissions against that setting (its `[profiles.NAME]` against
the user's profile of the same name), trusted or not, and its keys that choose who acts count
only once the user trusts the workspace (`bubu.trust`). What a workspace file may not set is
ignored and listed (`Settings.ignored`), never applied. Every key is one row of `KEYS`: the run
option it feeds, how its value is checked, and how a workspace may set it (`Guard`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shlex
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from bubu.errors import ConfigError

Source = Literal["flag", "env", "profile", "workspace", "user", "default"]
Guard = Literal[
    "free", "trust", "user_only", "sandbox", "off_only", "lower", "budget", "patterns", "narrow"
]
"""How a workspace file may set a key: `free`ly; only once the workspace is trusted (`trust`:
it chooses who acts); never (`user_only`); or only tighter than the user's setting: a stricter
`sandbox` mode, `off_only` (false, never true), `lower` (a limit; set where the user has none
unless the key has an `unset` value to stay under), `budget` (lower than a value the user set;
nothing where the user set none, since none means nothing is spent) or `patterns` (only
patterns the user's list already has, unless trusted) or `narrow` (only entries the user's list
already has, trusted or not)."""

FILE_NAME = "config.toml"


class Bad(ValueError):
    """A value of the wrong type or out of range (the message says what was expected)."""


def _str(v: object) -> str:
    if not isinstance(v, str) or not v.strip():
        raise Bad("expected a non-empty string")
    return v


def _model(v: object) -> str:
    s = _str(v)
    if ":" not in s:
        raise Bad(f"expected provider:model (e.g. anthropic:claude-sonnet-5-5), got {s!r}")
    return s


def _bool(v: object) -> bool:
    if not isinstance(v, bool):
        raise Bad("expected true or false")
    return v


def _pos_int(v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise Bad("expected a whole number above 0")
    return v


def _one_of(*allowed: str) -> Callable[[object], object]:
    def parse(v: object) -> str:
        if not isinstance(v, str) or v not in allowed:
            raise Bad(f"expected {' or '.join(repr(a) for a in allowed)}")
        return v

    return parse


def _pos_float(v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
        raise Bad("expected a number above 0")
    return float(v)


def _strs(v: object) -> list[str]:
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        raise Bad('expected a list of strings, e.g. ["a", "b"]')
    return list(v)


def _paths(v: object) -> list[str]:
    paths = _strs(v)
    for p in paths:
        if not (os.path.isabs(p) or p.startswith("~")):
            raise Bad(f"expected absolute paths (or ~/…), got {p!r}")
    return [os.path.normpath(os.path.expanduser(p)) for p in paths]


def _command(v: object) -> list[str]:
    cmd = _strs(v)
    if not cmd:
        raise Bad('expected a command as a list, e.g. ["notify-send", "bubu"]')
    return cmd


def _sandbox(v: object) -> str:
    from bubu.tools.sandbox import parse_mode

    try:
        return parse_mode(_str(v))
    except ConfigError as e:
        raise Bad(str(e)) from None


def _size(option: str, *, share: bool = False, off: bool = False) -> Callable[[str], int]:
    def parse(text: str) -> int:
        from bubu import sizes

        percent_of = sizes.memory_total if share else None
        return sizes.parse_size(text, option=option, off=off, percent_of=percent_of)

    return parse


def _models(v: object) -> list[str]:
    return [_model(m) for m in _strs(v)]


def _duration(key: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        from bubu.durations import parse_duration

        return parse_duration(text, option=key)

    return parse


def via(parse: Callable[[str], object]) -> Callable[[object], object]:
    """A key read by its flag's own parser (a duration, a size): the TOML string or number is
    passed as the flag's text, and the parser's one-line error becomes the file's."""

    def run(v: object) -> object:
        if isinstance(v, bool) or not isinstance(v, str | int | float):
            raise Bad("expected a string or a number")
        try:
            return parse(str(v))
        except (ConfigError, ValueError) as e:
            raise Bad(str(e)) from None

    return run


def _share(v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < 1:
        raise Bad("expected a share of the window between 0 and 1, e.g. 0.8")
    return float(v)


def _share_or_all(v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v <= 1:
        raise Bad("expected a share of the window above 0, at most 1 (1: every result whole)")
    return float(v)


_PRICE_FIELDS = ("input", "output", "cache_read", "cache_write")


def _prices(v: object) -> dict[str, dict[str, float]]:
    """`[prices."provider:model"]` tables: USD per million tokens, `input` and `output` needed."""
    if not isinstance(v, dict):
        raise Bad('expected tables [prices."provider:model"] with input and output per million')
    out: dict[str, dict[str, float]] = {}
    for spec, table in v.items():
        _model(spec)
        if not isinstance(table, dict):
            raise Bad(f'[prices."{spec}"] must be a table, e.g. input = 0.5, output = 1.5')
        unknown = [k for k in table if k not in _PRICE_FIELDS]
        if unknown:
            raise Bad(
                f'[prices."{spec}"]: unknown field {unknown[0]!r}; fields: '
                f"{', '.join(_PRICE_FIELDS)}"
            )
        for need in ("input", "output"):
            if need not in table:
                raise Bad(f'[prices."{spec}"] needs {need} (USD per million tokens)')
        row: dict[str, float] = {}
        for k, price in table.items():
            if isinstance(price, bool) or not isinstance(price, int | float) or price < 0:
                raise Bad(f'[prices."{spec}"]: {k} must be a number of USD per million, 0 or more')
            row[k] = float(price)
        out[spec] = row
    return out


_HOOK_EVENTS = (
    "PreToolUse",
    "PostToolUse",
    "UserPromptSubmit",
    "Stop",
    "SessionStart",
    "PreCompact",
    "Notification",
)  # bubu.engine.hooks.EVENTS
_HOOK_FIELDS = ("matcher", "command", "timeout", "on_error", "hooks", "type")


def _hooks(v: object) -> list[dict[str, object]]:
    """`[[hooks.EVENT]]` tables: a `command` (or Claude Code's `hooks = [{type = "command",
    command = …}]`), an optional `matcher`, `timeout` (seconds) and `on_error` ("deny" or
    "allow"). Returned flat, one dict per hook, in the order written."""
    if not isinstance(v, dict):
        raise Bad("expected tables [[hooks.PreToolUse]] with a command (see docs/extending.md)")
    out: list[dict[str, object]] = []
    for event, entries in v.items():
        if event not in _HOOK_EVENTS:
            raise Bad(f"unknown hook event {event!r}; the events are: {', '.join(_HOOK_EVENTS)}")
        if not isinstance(entries, list):
            raise Bad(f"hooks.{event} must be an array of tables: [[hooks.{event}]]")
        for entry in entries:
            out += _hook_entry(event, entry)
    return out


def _hook_entry(event: str, entry: object) -> list[dict[str, object]]:
    if not isinstance(entry, dict):
        raise Bad(f"each [[hooks.{event}]] must be a table with a command")
    unknown = [k for k in entry if k not in _HOOK_FIELDS]
    if unknown:
        raise Bad(
            f"[[hooks.{event}]]: unknown field {unknown[0]!r}; fields: "
            f"{', '.join(_HOOK_FIELDS[:4])}"
        )
    matcher = entry.get("matcher", "")
    if not isinstance(matcher, str):
        raise Bad(f"[[hooks.{event}]]: matcher must be a string (a tool name or a pattern)")
    inner = entry.get("hooks")
    if inner is not None:  # Claude Code's shape: a matcher and its list of commands
        if not isinstance(inner, list) or not inner:
            raise Bad(f"[[hooks.{event}]]: hooks must be a list of {{type, command}} tables")
        return [_one_hook(event, matcher, h, entry) for h in inner]
    return [_one_hook(event, matcher, entry, entry)]


def _one_hook(event: str, matcher: str, h: object, outer: dict[str, object]) -> dict[str, object]:
    if not isinstance(h, dict):
        raise Bad(f"[[hooks.{event}]]: each hook is a table with a command")
    if h.get("type", "command") != "command":
        raise Bad(f'[[hooks.{event}]]: type {h.get("type")!r} is not supported; use "command"')
    command = h.get("command")
    if not isinstance(command, str) or not command.strip():
        raise Bad(f"[[hooks.{event}]]: command must be a non-empty string (a shell command)")
    timeout = h.get("timeout", outer.get("timeout", 60))
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise Bad(f"[[hooks.{event}]]: timeout must be a number of seconds above 0")
    on_error = h.get("on_error", outer.get("on_error", "allow"))
    if on_error not in ("deny", "allow"):
        raise Bad(f'[[hooks.{event}]]: on_error must be "deny" or "allow"')
    return {
        "event": event,
        "matcher": matcher,
        "command": command,
        "timeout": float(timeout),
        "on_error": on_error,
    }


def _env_seconds(text: str) -> float:
    """BUBU_STALL_TIMEOUT, refused in the words the provider uses for it."""
    from bubu.providers._retry import STALL_ENV, stall_timeout

    try:
        value = float(text)
    except ValueError:
        raise ConfigError(
            f"{STALL_ENV} must be a number of seconds (got {text!r}); e.g. {STALL_ENV}=120"
        ) from None
    checked = stall_timeout(value, client_given=False)
    assert checked is not None  # an explicit value is always returned (or refused)
    return checked


def _limit_default(name: str) -> Callable[[], int]:
    def default() -> int:
        from bubu.tools.limits import Limits

        limits = Limits()
        by = {"max_procs": limits.proc_count(), "max_memory": limits.memory_bytes()}
        return by.get(name) or limits.file_bytes()

    return default


def _loop_default() -> int:
    from bubu.engine.loops import DEFAULT_LOOP_LIMIT

    return DEFAULT_LOOP_LIMIT


def _quota_default() -> int:
    from bubu.context.quota import DEFAULT_STORE_QUOTA

    return DEFAULT_STORE_QUOTA


@dataclass(frozen=True, slots=True)
class Key:
    """One config key: the run option it feeds and how it is read and guarded."""

    name: str
    option: str
    parse: Callable[[object], object]
    doc: str
    env: str | None = None
    """An environment variable Bubu reads for it (besides those the flag reads itself)."""
    env_parse: Callable[[str], object] | None = None
    guard: Guard = "free"
    relative: bool = False
    """A path, relative to the directory of the file that names it."""
    unset: object = None
    """The value in force when nobody set the key (a limit a workspace must stay under), or a
    function that computes it (a share of this machine's memory)."""
    zero_is_off: bool = False
    """0 lifts the limit (``off``), so it is the loosest value, not the lowest."""
    merge: bool = False
    """A list every layer adds to (the flag's, the user's and an admitted workspace's), rather
    than one that replaces the layer below."""


KEYS: tuple[Key, ...] = (
    Key(
        "model",
        "model",
        _model,
        "provider:model for new sessions",
        env="BUBU_MODEL",
        guard="trust",
    ),
    Key("base_url", "base_url", _str, "an OpenAI-compatible server", guard="trust"),
    Key(
        "context_window",
        "context_window",
        _pos_int,
        "the model's window in tokens",
        guard="budget",
    ),
    Key(
        "thinking",
        "thinking",
        _pos_int,
        "extended thinking budget in tokens (Anthropic)",
        guard="budget",
    ),
    Key(
        "reasoning_effort",
        "reasoning_effort",
        _one_of("low", "medium", "high"),
        "how hard an OpenAI reasoning model thinks",
        guard="budget",
    ),
    Key(
        "max_output_tokens",
        "max_output_tokens",
        _pos_int,
        "tokens one model call may produce, reasoning included",
        guard="budget",
    ),
    Key(
        "cache_ttl",
        "cache_ttl",
        _one_of("5m", "1h"),
        "how long Anthropic keeps the prompt cache",
        guard="lower",
        unset="5m",
    ),
    Key(
        "native_tools",
        "native_tools",
        _bool,
        "offer the file and command tools in the provider's own shapes (default: at the "
        "provider's own API only)",
        guard="trust",
    ),
    Key(
        "stall_timeout",
        "stall_timeout",
        _pos_float,
        "seconds without a byte before a retry",
        env="BUBU_STALL_TIMEOUT",
        env_parse=_env_seconds,
    ),
    Key("mcp", "mcp", _str, "an MCP servers file (JSON)", guard="trust", relative=True),
    Key("sandbox", "sandbox", _sandbox, "workspace-write, read-only or off", guard="sandbox"),
    Key("network", "network", _bool, "sandboxed commands may use the network", guard="off_only"),
    Key(
        "allow_socket",
        "allow_socket",
        _strs,
        "host Unix sockets (or their directories) sandboxed commands may reach",
        guard="user_only",
    ),
    Key(
        "allow_write",
        "allow_write",
        _paths,
        "paths outside the workspace the file tools may write without asking",
        guard="user_only",
    ),
    Key(
        "ssh_agent",
        "ssh_agent",
        _bool,
        "sandboxed commands may use the SSH agent",
        guard="off_only",
    ),
    Key(
        "max_procs",
        "max_procs",
        _pos_int,
        "processes and threads one sandboxed command may have",
        guard="lower",
        unset=_limit_default("max_procs"),
    ),
    Key(
        "max_memory",
        "max_memory",
        via(_size("max_memory", share=True)),
        "memory one sandboxed command may use (a size, or a share like 50%)",
        guard="lower",
        unset=_limit_default("max_memory"),
    ),
    Key(
        "max_file_size",
        "max_file_size",
        via(_size("max_file_size")),
        "the largest file a sandboxed command may write",
        guard="lower",
        unset=_limit_default("max_file_size"),
    ),
    Key(
        "web_domains",
        "web_domains",
        _strs,
        "domains web_fetch may fetch without --network",
        guard="narrow",
    ),
    Key(
        "web_search_url",
        "web_search_url",
        _str,
        "a search backend's URL with {query} (SearXNG JSON) for web_search",
        guard="user_only",
    ),
    Key(
        "web_search",
        "web_search",
        _bool,
        "let the model search the web with its provider's own search tool",
        guard="off_only",
    ),
    Key("yes", "yes", _bool, "approve every permission request", guard="off_only"),
    Key("deny", "deny", _strs, "command patterns and path: globs refused unasked", merge=True),
    Key("hooks", "hooks", _hooks, "programs run at points of a turn", guard="trust", merge=True),
    Key("allow", "allow", _strs, "command patterns allowed without asking", guard="patterns"),
    Key(
        "fallback_models",
        "fallback_model",
        _models,
        "models to switch to while the primary fails",
        guard="trust",
    ),
    Key(
        "retry_for",
        "retry_for",
        via(_duration("retry_for")),
        "how long to wait out outages",
        guard="lower",
        unset=6 * 3600.0,  # bubu.engine.backoff.DEFAULT_RETRY_FOR_S
    ),
    Key("max_steps", "max_steps", _pos_int, "model calls per turn", guard="lower"),
    Key(
        "max_tokens",
        "max_tokens",
        _pos_int,
        "tokens (in + out) a turn may use before it stops",
        guard="lower",
    ),
    Key(
        "max_time",
        "max_time",
        via(_duration("max_time")),
        "running time a turn may take",
        guard="lower",
    ),
    Key(
        "env",
        "pass_env",
        _strs,
        "secret variables passed on to commands by name",
        guard="user_only",
    ),
    Key("max_cost", "max_cost", _pos_float, "USD a turn may spend before it stops", guard="lower"),
    Key(
        "store_quota",
        "store_quota",
        via(_size("store_quota", off=True)),
        "bytes of whole tool results a session may store (256MiB, 1GiB, off)",
        guard="lower",
        unset=_quota_default,
        zero_is_off=True,
    ),
    Key("tool_timeout", "tool_timeout", _pos_float, "seconds per tool call", guard="lower"),
    Key(
        "max_background",
        "max_background",
        _pos_int,
        "background processes a session may run at once",
        guard="lower",
        unset=4,  # bubu.tools.background.DEFAULT_LIMIT
    ),
    Key(
        "notify",
        "notify",
        _command,
        "a command told about turn ends and requests",
        guard="user_only",
    ),
    Key(
        "notify_timeout",
        "notify_timeout",
        _pos_float,
        "seconds a notifier may run",
        guard="lower",
        unset=10.0,  # bubu.notify.DEFAULT_TIMEOUT_S
    ),
    Key(
        "loop_limit",
        "loop_limit",
        _pos_int,
        "same call, same result, in a row before a stop",
        guard="lower",
        unset=_loop_default,
    ),
    Key("prices", "prices", _prices, "USD per million tokens by model", guard="user_only"),
    Key("compact_at", "compact_at", _share, "share of the window that starts a compaction"),
    Key("compact_to", "compact_to", _share, "share of the window a compaction aims at"),
    Key(
        "summary_result_share",
        "summary_result_share",
        _share_or_all,
        "share of the window one result takes in a summary's reading",
    ),
)
"""Every key a config file may set; a new run option is one more row here."""

BY_NAME = {k.name: k for k in KEYS}
BY_OPTION = {k.option: k for k in KEYS}
_STRICTNESS = {"off": 0, "workspace-write": 1, "read-only": 2}


@dataclass(frozen=True, slots=True)
class Setting:
    """A key's effective value and where it came from (`where`: a file, variable or profile)."""

    key: str
    value: object
    source: Source
    where: str | None = None


def said_by(setting: Setting | None, flag: str) -> str:
    """How a message names where `setting` came from: `flag` when it was given so (or is not
    known), else its variable, its profile, or the key and the config file that set it."""
    if setting is None or setting.source in ("flag", "default"):
        return flag
    match setting.source:
        case "env":
            return f"${setting.where}" if setting.where else flag
        case "profile":
            return f"{setting.key} of the profile {setting.where}"
        case _:
            return f"{setting.key} in {setting.where}"


@dataclass(slots=True)
class _Layer:
    path: Path
    text: str
    values: dict[str, object] = field(default_factory=dict)
    profiles: dict[str, dict[str, object]] = field(default_factory=dict)
    profile: str | None = None


def user_file() -> Path:
    """`$BUBU_HOME/config.toml` (BUBU_HOME defaults to ~/.bubu)."""
    home = Path(os.environ.get("BUBU_HOME") or Path.home() / ".bubu").expanduser()
    return home / FILE_NAME


def workspace_file(workspace: str | Path) -> Path:
    """A workspace's `.bubu/config.toml`."""
    return Path(workspace).expanduser().resolve() / ".bubu" / FILE_NAME


def _line_of(text: str, key: str, table: str | None) -> int | None:
    """The line where `key` is set inside `table` (None: top level), for error messages."""
    current: str | None = None
    pattern = re.compile(rf"""^\s*["']?{re.escape(key)}["']?\s*=""")
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("["):
            current = stripped.strip("[] ").replace('"', "").replace("'", "")
            if table is not None and current == table and key == table.rsplit(".", 1)[-1]:
                return n
        elif current == table and pattern.match(line):
            return n
    return None


def _where(layer: _Layer, key: str, table: str | None = None) -> str:
    line = _line_of(layer.text, key, table)
    return f"{layer.path}:{line}" if line else str(layer.path)


def _check_keys(layer: _Layer, raw: Mapping[str, object], table: str | None) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, value in raw.items():
        key = BY_NAME.get(name)
        if key is None:
            import difflib

            close = difflib.get_close_matches(name, list(BY_NAME), n=1)
            hint = (
                f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(BY_NAME)}"
            )
            raise ConfigError(f"{_where(layer, name, table)}: unknown key {name!r}{hint}")
        try:
            parsed = key.parse(value)
        except Bad as e:
            raise ConfigError(f"{_where(layer, name, table)}: key {name!r}: {e}") from None
        if key.relative and isinstance(parsed, str):
            parsed = str((layer.path.parent / Path(parsed).expanduser()).resolve())
        out[name] = parsed
    return out


def _read(path: Path) -> _Layer | None:
    """One config file, checked; None if it does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read the config file: {e}") from None
    layer = _Layer(path=path, text=text)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(e))
        where = f"{path}:{m.group(1)}" if m else str(path)
        col = f" (column {m.group(2)})" if m else ""
        raise ConfigError(f"{where}: not valid TOML: {msg}{col}") from None
    profiles = data.pop("profiles", {})
    chosen = data.pop("profile", None)
    if chosen is not None and not isinstance(chosen, str):
        raise ConfigError(f"{_where(layer, 'profile')}: key 'profile': expected a profile name")
    layer.profile = chosen
    if not isinstance(profiles, dict):
        raise ConfigError(f"{_where(layer, 'profiles')}: 'profiles' must be tables [profiles.NAME]")
    layer.values = _check_keys(layer, data, None)
    for name, table in profiles.items():
        if not isinstance(table, dict):
            raise ConfigError(
                f"{_where(layer, name, 'profiles')}: profile {name!r} must be a table"
            )
        layer.profiles[name] = _check_keys(layer, table, f"profiles.{name}")
    return layer


_RANK = {"low": 0, "medium": 1, "high": 2, "5m": 0, "1h": 1}
"""How much an ordered choice spends (a workspace may only pick one that spends less)."""

TrustState = Literal["trusted", "untrusted", "changed"]


@dataclass(frozen=True, slots=True)
class Ignored:
    """A workspace key that was not applied: where it is set, what it said, and why not."""

    key: str
    value: object
    where: str
    reason: str
    kind: Literal["untrusted", "looser", "user_only"]


def _amount(value: object, zero_is_off: bool = False) -> float:
    if zero_is_off and value == 0:
        return math.inf
    if isinstance(value, str):
        return float(_RANK[value])
    assert isinstance(value, int | float)  # a limit's parser gives a number
    return float(value)


def _admit(key: Key, value: object, user: object, trusted: bool) -> tuple[object, str | None]:
    """What of a workspace's `value` stands against the user's effective `user` value: the
    value to use (`value`, or the part that tightens) and, when something was left out, why."""
    name = key.name
    if key.guard == "free":
        return value, None
    if key.guard == "user_only":
        return None, f"only your own config file may set {name!r} ({user_file()})"
    if key.guard == "trust":
        if trusted:
            return value, None
        return None, "the workspace is not trusted, and this key chooses who acts (`bubu trust`)"
    if key.guard == "sandbox":
        was = str(user or "workspace-write")
        if _STRICTNESS[str(value)] < _STRICTNESS[was]:
            return None, f"sandbox {value!r} is looser than your {was!r}"
        return value, None
    if key.guard == "off_only":
        if value is True and user is not True:
            return None, f"{name} = true widens what runs without asking"
        return value, None
    if key.guard == "narrow":
        mine = _strs(user or [])
        extra = [p for p in _strs(value) if p not in mine]
        kept = [p for p in _strs(value) if p in mine]
        if extra:
            return kept, f"{name} adds {', '.join(repr(p) for p in extra)}, which yours has not"
        return value, None
    if key.guard == "patterns":
        if trusted:
            return value, None
        mine = _strs(user or [])
        extra = [p for p in _strs(value) if p not in mine]
        kept = [p for p in _strs(value) if p in mine]
        if extra:
            return kept, (
                f"allow adds {', '.join(repr(p) for p in extra)}, which your settings do not "
                "allow and the workspace is not trusted (`bubu trust`)"
            )
        return value, None
    limit = user if user is not None else key.unset
    if callable(limit):
        limit = limit()
    if limit is None:
        if key.guard == "lower":
            return value, None  # no limit of the user's: any limit is tighter
        return None, f"{name} spends more than you set (you set none)"
    if _amount(value, key.zero_is_off) > _amount(limit, key.zero_is_off):
        return None, f"{name} {value!r} is above your {limit!r}"
    return value, None


@dataclass(frozen=True, slots=True)
class Settings:
    """The effective settings, key by key, and what they were made from."""

    values: dict[str, Setting]
    files: tuple[str, ...]
    profile: str | None
    ignored: tuple[Ignored, ...] = ()
    """Workspace keys that were not applied, and why."""
    trust: TrustState | None = None
    """Whether the workspace file (if any) is trusted to choose who acts."""
    workspace: str | None = None
    """The workspace whose file was read (its root directory)."""


def chooser_files(ws: _Layer) -> list[Path]:
    """The workspace file and every file it names for a key that chooses who acts (an MCP
    servers file): what a trust is recorded for."""
    named: list[Path] = []
    for table in (ws.values, *ws.profiles.values()):
        for name, value in table.items():
            if BY_NAME[name].guard == "trust" and BY_NAME[name].relative and isinstance(value, str):
                named.append(Path(value))
    # Prompt files may choose a model and approve commands: a change to one asks again too.
    root = ws.path.parent.parent
    for d in (".bubu/commands", ".claude/commands"):
        with contextlib.suppress(OSError):
            named += sorted(p for p in (root / d).glob("*.md") if p.is_file())
    from bubu.agents import agent_files

    # The programs its hooks and MCP servers run from the workspace: a sandboxed command can
    # rewrite them, and they run outside the sandbox.
    named += run_files(ws)
    # A workspace's agents choose a model, tools and instructions: trusted with the file.
    return [ws.path, *dict.fromkeys(named), *agent_files(root_of(ws))]


_PROJECT_VARS = ("BUBU_PROJECT_DIR", "CLAUDE_PROJECT_DIR")


def named_files(root: str, words: Iterable[str]) -> list[Path]:
    """The files of the workspace `root` that a command line's words name (``sh
    scripts/hook.sh``, ``python $BUBU_PROJECT_DIR/tools/server.py``), resolved."""
    base = Path(root).resolve()
    out: list[Path] = []
    for given in words:
        word = given
        for var in _PROJECT_VARS:
            for form in (f"${{{var}}}", f"${var}"):
                if word.startswith(form):
                    word = str(base) + word[len(form) :]
        if word.startswith("-"):
            word = word.rpartition("=")[2]
        if not word or word.startswith("-"):
            continue
        with contextlib.suppress(OSError, ValueError):
            path = (base / word).resolve()
            if path.is_relative_to(base) and path != base and path.is_file():
                out.append(path)
    return out


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command, comments=True)
    except ValueError:
        return command.split()


def run_files(ws: _Layer) -> list[Path]:
    """The workspace files that its hooks' commands and its MCP servers' command lines name."""
    root = root_of(ws)
    out: list[Path] = []
    for table in (ws.values, *ws.profiles.values()):
        for h in _as_list(table.get("hooks")):
            if isinstance(h, dict) and isinstance(h.get("command"), str):
                out += named_files(root, _words(h["command"]))
        mcp = table.get("mcp")
        if isinstance(mcp, str):
            out += _mcp_files(root, Path(mcp))
    return out


def _mcp_files(root: str, path: Path) -> list[Path]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []  # starting the servers says what is wrong with it
    out: list[Path] = []
    servers = data if isinstance(data, dict) else {}
    for key in ("servers", "mcpServers"):
        table = servers.get(key)
        for cfg in table.values() if isinstance(table, dict) else ():
            if not isinstance(cfg, dict):
                continue
            cmd = cfg.get("command")
            words = [cmd] if isinstance(cmd, str) else list(cmd) if isinstance(cmd, list) else []
            args = cfg.get("args")
            words += args if isinstance(args, list) else []
            where = cfg.get("cwd") if isinstance(cfg.get("cwd"), str) else None
            words = [w for w in words if isinstance(w, str)]
            out += named_files(root, words)
            if where is not None:
                out += named_files(root, [str(Path(where) / w) for w in words])
    return out


def workspace_hooks(workspace: str | Path) -> tuple[str, list[object]] | None:
    """The workspace whose config sets hooks and those hook tables (None: it sets none)."""
    ws = workspace_layer(workspace)
    if ws is None:
        return None
    found: list[object] = []
    for table in (ws.values, *ws.profiles.values()):
        found += _as_list(table.get("hooks"))
    return (root_of(ws), found) if found else None


def still_trusted(workspace: str) -> bool:
    """Whether `workspace`'s config file, and the files it names, are still as the user
    trusted them (a hook of the workspace is checked before each run)."""
    try:
        ws = workspace_layer(workspace)
    except ConfigError:
        return False
    return ws is not None and trust_state(ws) == "trusted"


def choosers(ws: _Layer) -> list[str]:
    """The keys (with their table) by which the workspace file would choose who acts."""
    out = [n for n in ws.values if BY_NAME[n].guard == "trust"]
    for pname, table in ws.profiles.items():
        out += [f"profiles.{pname}.{n}" for n in table if BY_NAME[n].guard == "trust"]
    return out


def workspace_layer(workspace: str | Path) -> _Layer | None:
    """A workspace's config file, checked (None when it has none, or it is the user's)."""
    ws = _read(workspace_file(workspace))
    if ws is not None and ws.path.resolve() == user_file().expanduser().resolve():
        return None  # a workspace at $BUBU_HOME's parent: the one file is the user's
    return ws


def root_of(ws: _Layer) -> str:
    """The workspace directory of a workspace's `.bubu/config.toml`."""
    return str(ws.path.parent.parent)


def trust_state(ws: _Layer) -> TrustState:
    """Whether the user trusts this workspace file (and the files it names) as it is now."""
    from bubu import trust

    entry = trust.answer(root_of(ws))
    if entry is None or not entry.trusted:
        return "untrusted"
    return "trusted" if entry.digest == trust.digest(chooser_files(ws)) else "changed"


def resolve(
    *,
    workspace: str | Path | None,
    flags: Mapping[str, tuple[object, Source, str | None]],
    defaults: Mapping[str, object],
    profile: str | None = None,
    profile_source: Source = "flag",
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Merge the layers; `flags` holds the values the command line (or a flag's own variable) gave.

    Raises ConfigError with `path:line: key` for a bad file, before anything is written; what a
    workspace file may not set is left out and listed in `Settings.ignored`.
    """
    environ = os.environ if env is None else env
    user = _read(user_file())
    ws = workspace_layer(workspace) if workspace is not None else None
    name = profile or (user.profile if user else None)
    if profile is None and name is not None:
        profile_source = "user"
    if name is not None and not any(layer and name in layer.profiles for layer in (user, ws)):
        known = sorted({p for layer in (user, ws) if layer for p in layer.profiles})
        listed = ", ".join(known) if known else "none are defined"
        by = {"flag": "-p", "env": "BUBU_PROFILE", "user": f"{user_file()} (profile =)"}.get(
            profile_source, "-p"
        )
        raise ConfigError(f"no profile {name!r} ({by}); profiles: {listed}")
    state = trust_state(ws) if ws is not None else None
    trusted = state == "trusted"
    user_profile = user.profiles.get(name, {}) if user and name else {}
    ws_profile = ws.profiles.get(name, {}) if ws and name else {}
    ignored: list[Ignored] = []
    out: dict[str, Setting] = {}
    for key in KEYS:
        if key.merge:
            out[key.name] = _merged(
                key,
                flags,
                user=user,
                user_profile=user_profile,
                ws=ws,
                ws_profile=ws_profile,
                profile=name,
                trusted=trusted,
                ignored=ignored,
            )
            continue
        if key.option in flags:
            value, src, where = flags[key.option]
            out[key.name] = Setting(key.name, value, src, where)
            continue
        if key.env and environ.get(key.env):
            raw = environ[key.env]
            try:
                value = key.env_parse(raw) if key.env_parse else key.parse(raw)
            except Bad as e:
                raise ConfigError(f"${key.env}: {e}") from None
            out[key.name] = Setting(key.name, value, "env", key.env)
            continue
        # The user's own setting: their profile, else their file, else the default.
        mine = Setting(key.name, defaults.get(key.option), "default")
        if key.name in user_profile:
            mine = Setting(key.name, user_profile[key.name], "profile", name)
        elif user is not None and key.name in user.values:
            mine = Setting(key.name, user.values[key.name], "user", str(user.path))
        # The workspace's: its profile of that name, else its top level.
        table: str | None = None
        if key.name in ws_profile:
            table = f"profiles.{name}"
            theirs = ws_profile[key.name]
        elif ws is not None and key.name in ws.values:
            theirs = ws.values[key.name]
        else:
            out[key.name] = mine
            continue
        assert ws is not None
        if key.guard in ("free", "trust") and table is None and mine.source == "profile":
            out[key.name] = mine  # the user's profile outranks a workspace's top level
            continue
        value, why = _admit(key, theirs, mine.value, trusted)
        if why is not None:
            if key.guard == "trust" and state == "changed":
                why = "the workspace file changed since you trusted it (`bubu trust` again)"
            kind: Literal["untrusted", "looser", "user_only"] = (
                "untrusted"
                if key.guard in ("trust", "patterns")
                else "user_only"
                if key.guard == "user_only"
                else "looser"
            )
            ignored.append(Ignored(key.name, theirs, _where(ws, key.name, table), why, kind))
        narrowed = key.guard in ("patterns", "narrow") and value != (mine.value or [])
        if why is None or narrowed:
            out[key.name] = Setting(key.name, value, "workspace", str(ws.path))
        else:
            out[key.name] = mine
    files = tuple(str(layer.path) for layer in (user, ws) if layer is not None)
    return Settings(
        values=out,
        files=files,
        profile=name,
        ignored=tuple(ignored),
        trust=state,
        workspace=root_of(ws) if ws is not None else None,
    )


def _merged(
    key: Key,
    flags: Mapping[str, tuple[object, Source, str | None]],
    *,
    user: _Layer | None,
    user_profile: dict[str, object],
    ws: _Layer | None,
    ws_profile: dict[str, object],
    profile: str | None,
    trusted: bool,
    ignored: list[Ignored],
) -> Setting:
    """A `merge` key: the flag's values, the user's and the workspace's (when its guard admits
    them), in that order; its source is the highest layer that gave any."""
    parts: list[tuple[list[object], Source, str | None]] = []
    if key.option in flags:
        value, src, where = flags[key.option]
        parts.append((list(value) if isinstance(value, list | tuple) else [], src, where))
    if key.name in user_profile:
        parts.append((list(_as_list(user_profile[key.name])), "profile", profile))
    elif user is not None and key.name in user.values:
        parts.append((list(_as_list(user.values[key.name])), "user", str(user.path)))
    theirs, table = None, None
    if key.name in ws_profile:
        theirs, table = ws_profile[key.name], f"profiles.{profile}"
    elif ws is not None and key.name in ws.values:
        theirs = ws.values[key.name]
    if theirs is not None and ws is not None:
        if key.guard == "trust" and not trusted:
            why = "the workspace is not trusted, and this key chooses who acts (`bubu trust`)"
            ignored.append(Ignored(key.name, theirs, _where(ws, key.name, table), why, "untrusted"))
        else:
            parts.append((list(_as_list(theirs)), "workspace", str(ws.path)))
    if not parts:
        return Setting(key.name, None, "default")
    merged: list[object] = []
    for values, _, _ in parts:
        merged += [v for v in values if v not in merged]
    return Setting(key.name, merged, parts[0][1], parts[0][2])


def _as_list(v: object) -> list[object]:
    return list(v) if isinstance(v, list | tuple) else []


def ignored_line(s: Settings) -> str | None:
    """One line naming the workspace keys that were ignored (None: none were)."""
    if not s.ignored:
        return None
    keys = ", ".join(dict.fromkeys(i.key for i in s.ignored))
    trust = (
        " (`bubu trust` if you wrote it)" if any(i.kind == "untrusted" for i in s.ignored) else ""
    )
    return f"workspace config: ignored {keys}; `bubu config` says why{trust}"
