"""Settings from config files: `$BUBU_HOME/config.toml`, a workspace's `.bubu/config.toml` and
their `[profiles.NAME]` tables, under the command line and the environment.

Precedence, highest first: flag > environment > profile > workspace file > user file > default.
A workspace file comes with the repository, so it may only tighten permissions; keys that would
run commands or send requests elsewhere belong to the user's own file. Every key is one row of
`KEYS`: the run option it feeds, how its value is checked, and how a workspace may set it.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from bubu.errors import ConfigError

Source = Literal["flag", "env", "profile", "workspace", "user", "default"]
Guard = Literal["free", "tighten", "user_only"]
"""How a workspace file may set a key: freely, only tighter than the user's, or not at all."""

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


def _models(v: object) -> list[str]:
    return [_model(m) for m in _strs(v)]


def _duration(key: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        from bubu.cli.longrun import parse_duration

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
            raise Bad(f'[prices."{spec}"]: unknown field {unknown[0]!r}; fields: '
                      f"{', '.join(_PRICE_FIELDS)}")  # fmt: skip
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


KEYS: tuple[Key, ...] = (
    Key("model", "model", _model, "provider:model for new sessions", env="BUBU_MODEL"),
    Key("base_url", "base_url", _str, "an OpenAI-compatible server", guard="user_only"),
    Key("context_window", "context_window", _pos_int, "the model's window in tokens"),
    Key("thinking", "thinking", _pos_int, "extended thinking budget in tokens (Anthropic)"),
    Key(
        "reasoning_effort",
        "reasoning_effort",
        _one_of("low", "medium", "high"),
        "how hard an OpenAI reasoning model thinks",
    ),
    Key(
        "max_output_tokens",
        "max_output_tokens",
        _pos_int,
        "tokens one model call may produce, reasoning included",
    ),
    Key("cache_ttl", "cache_ttl", _one_of("5m", "1h"), "how long Anthropic keeps the prompt cache"),
    Key(
        "stall_timeout",
        "stall_timeout",
        _pos_float,
        "seconds without a byte before a retry",
        env="BUBU_STALL_TIMEOUT",
        env_parse=_env_seconds,
    ),
    Key("mcp", "mcp", _str, "an MCP servers file (JSON)", guard="user_only", relative=True),
    Key("sandbox", "sandbox", _sandbox, "workspace-write, read-only or off", guard="tighten"),
    Key("network", "network", _bool, "sandboxed commands may use the network", guard="tighten"),
    Key("yes", "yes", _bool, "approve every permission request", guard="tighten"),
    Key("allow", "allow", _strs, "command patterns allowed without asking", guard="tighten"),
    Key(
        "fallback_models", "fallback_model", _models, "models to switch to while the primary fails"
    ),
    Key("retry_for", "retry_for", via(_duration("retry_for")), "how long to wait out outages"),
    Key("max_steps", "max_steps", _pos_int, "model calls per turn"),
    Key("max_tokens", "max_tokens", _pos_int, "tokens (in + out) a turn may use before it stops"),
    Key("max_time", "max_time", via(_duration("max_time")), "running time a turn may take"),
    Key(
        "env",
        "pass_env",
        _strs,
        "secret variables passed on to commands by name",
        guard="user_only",
    ),
    Key("max_cost", "max_cost", _pos_float, "USD a turn may spend before it stops"),
    Key("tool_timeout", "tool_timeout", _pos_float, "seconds per tool call"),
    Key(
        "notify",
        "notify",
        _command,
        "a command told about turn ends and requests",
        guard="user_only",
    ),
    Key("notify_timeout", "notify_timeout", _pos_float, "seconds a notifier may run"),
    Key("loop_limit", "loop_limit", _pos_int, "same call, same result, in a row before a stop"),
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


def _guard(
    layer: _Layer, values: Mapping[str, object], base: Mapping[str, object], table: str | None
) -> None:
    """Refuse what a workspace file may not set: keys of the user's, and any loosening."""
    for name, value in values.items():
        key = BY_NAME[name]
        where = _where(layer, name, table)
        if key.guard == "user_only":
            raise ConfigError(
                f"{where}: key {name!r} may not be set in a workspace file (a repository must not "
                f"choose what runs or where requests go); set it in {user_file()}"
            )
        if key.guard != "tighten":
            continue
        before = base.get(name)
        looser: str | None = None
        if name == "sandbox":
            was = str(before or "workspace-write")
            if _STRICTNESS[str(value)] < _STRICTNESS[was]:
                looser = f"sandbox {value!r} is looser than {was!r}"
        elif name in ("network", "yes"):
            if value is True and before is not True:
                looser = f"{name} = true widens what runs without asking"
        elif name == "allow":
            extra = [p for p in _strs(value) if p not in _strs(before or [])]
            if extra:
                looser = f"allow adds {extra[0]!r}, which the user's settings do not allow"
        if looser is not None:
            raise ConfigError(
                f"{where}: key {name!r}: a workspace file may only tighten permissions; {looser}"
            )


@dataclass(frozen=True, slots=True)
class Settings:
    """The effective settings, key by key, and what they were made from."""

    values: dict[str, Setting]
    files: tuple[str, ...]
    profile: str | None


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

    Raises ConfigError with `path:line: key` for a bad file, before anything is written.
    """
    environ = os.environ if env is None else env
    user = _read(user_file())
    ws = _read(workspace_file(workspace)) if workspace is not None else None
    if ws is not None and user is not None and ws.path.resolve() == user.path.resolve():
        ws = None  # a workspace at $BUBU_HOME's parent: the one file is the user's
    base = dict(user.values) if user else {}
    if ws is not None:
        _guard(ws, ws.values, base, None)
        for pname, table in ws.profiles.items():
            _guard(ws, table, base, f"profiles.{pname}")
    name = profile or (user.profile if user else None)
    if profile is None and name is not None:
        profile_source = "user"
    chosen: dict[str, object] = {}
    origin: str | None = None
    if name is not None:
        found = [
            (layer, layer.profiles[name])
            for layer in (user, ws)
            if layer and name in layer.profiles
        ]
        if not found:
            known = sorted({p for layer in (user, ws) if layer for p in layer.profiles})
            listed = ", ".join(known) if known else "none are defined"
            by = {"flag": "-p", "env": "BUBU_PROFILE", "user": f"{user_file()} (profile =)"}.get(
                profile_source, "-p"
            )
            raise ConfigError(f"no profile {name!r} ({by}); profiles: {listed}")
        for _layer, table in found:  # the user's profile, then the workspace's on top
            chosen.update(table)
        origin = name
    out: dict[str, Setting] = {}
    for key in KEYS:
        if key.option in flags:
            value, src, where = flags[key.option]
            out[key.name] = Setting(key.name, value, src, where)
        elif key.env and environ.get(key.env):
            raw = environ[key.env]
            try:
                value = key.env_parse(raw) if key.env_parse else key.parse(raw)
            except Bad as e:
                raise ConfigError(f"${key.env}: {e}") from None
            out[key.name] = Setting(key.name, value, "env", key.env)
        elif key.name in chosen:
            out[key.name] = Setting(key.name, chosen[key.name], "profile", origin)
        elif ws is not None and key.name in ws.values:
            out[key.name] = Setting(key.name, ws.values[key.name], "workspace", str(ws.path))
        elif user is not None and key.name in user.values:
            out[key.name] = Setting(key.name, user.values[key.name], "user", str(user.path))
        else:
            out[key.name] = Setting(key.name, defaults.get(key.option), "default")
    files = tuple(str(layer.path) for layer in (user, ws) if layer is not None)
    return Settings(values=out, files=files, profile=name)
