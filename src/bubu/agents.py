"""Named agents: Markdown files with a front matter, what `delegate{agent}` starts a child as.

    ---
    name: reviewer
    description: Reviews a change for bugs
    tools: read_file, grep, run_command     (or Claude Code's names: Read, Grep, Bash)
    model: anthropic:claude-sonnet-5-5      (inherit, or leave out: the parent's model)
    ---
    You review code. Say what is wrong and where …

They are read from ``$BUBU_HOME/agents/*.md`` and ``~/.claude/agents/*.md`` (the user's), and from
a workspace's ``.bubu/agents/*.md`` and ``.claude/agents/*.md``, the same shape as Claude Code's.
A workspace's agent chooses a model, tools and instructions, so it counts only in a workspace the
user trusts (`bubu trust`, docs/security.md): an untrusted workspace's agents are ignored, and
said so. A workspace's agent wins over the user's of the same name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from bubu.errors import ConfigError

CLAUDE_TOOLS = {
    "Read": "read_file",
    "Write": "write_file",
    "Edit": "edit_file",
    "MultiEdit": "edit_file",
    "Bash": "run_command",
    "Grep": "grep",
    "Glob": "list_files",
    "LS": "list_files",
}
"""Claude Code's tool names, as Bubu's tools (names that are neither are kept as they are)."""

INHERIT = frozenset({"inherit", "sonnet", "opus", "haiku", ""})
"""Model names that mean "the parent's model" (Claude Code's aliases name no provider)."""

MAX_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentDef:
    """One named agent."""

    name: str
    description: str = ""
    tools: tuple[str, ...] | None = None
    """Bubu tool names (None: the parent's tools)."""
    model: str | None = None
    """A model spec (None: the parent's model)."""
    instructions: str = ""
    path: str = ""
    scope: str = "user"
    """``user`` or ``workspace``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Agents:
    """The agents a workspace may use, and what was left out and why."""

    found: dict[str, AgentDef] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()


def _home() -> Path:
    return Path(os.environ.get("BUBU_HOME") or Path.home() / ".bubu").expanduser()


def user_dirs() -> list[Path]:
    """Where the user's own agents are."""
    return [Path.home() / ".claude" / "agents", _home() / "agents"]


def workspace_dirs(workspace: str | Path) -> list[Path]:
    """Where a workspace's agents are (the later wins over the earlier)."""
    ws = Path(workspace)
    return [ws / ".claude" / "agents", ws / ".bubu" / "agents"]


def agent_files(workspace: str | Path) -> list[Path]:
    """A workspace's agent files, in a fixed order (what its trust is recorded for)."""
    return [p for d in workspace_dirs(workspace) for p in _md_files(d)]


def _md_files(d: Path) -> list[Path]:
    try:
        return sorted(p for p in d.iterdir() if p.suffix == ".md" and p.is_file())
    except OSError:
        return []


def _scalar(raw: str) -> str:
    v = raw.strip()
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        return v[1:-1]
    return v


def front_matter(text: str, where: str) -> tuple[dict[str, str | list[str]], str]:
    """The front matter's keys (a scalar, or a list in ``[a, b]`` or ``- a`` form) and the body.

    A small reader of the YAML that agent files use, not all of YAML: a file it cannot read is
    a ConfigError naming the file and line."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise ConfigError(
            f"{where}: an agent file starts with a '---' front matter (name, description …)"
        )
    keys: dict[str, str | list[str]] = {}
    current: str | None = None
    for n, line in enumerate(lines[1:], start=2):
        if line.strip() == "---":
            return keys, "\n".join(lines[n:]).strip() + "\n"
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.lstrip().startswith("- ") and current is not None:
            value = keys.get(current)
            items = value if isinstance(value, list) else []
            items.append(_scalar(line.lstrip()[2:]))
            keys[current] = items
            continue
        key, sep, value = line.partition(":")
        if not sep or not key.strip() or key != key.lstrip():
            raise ConfigError(f"{where}:{n}: expected 'key: value' in the front matter")
        current = key.strip()
        v = value.strip()
        if v.startswith("[") and v.endswith("]"):
            keys[current] = [_scalar(x) for x in v[1:-1].split(",") if x.strip()]
        else:
            keys[current] = _scalar(v) if v else []
    raise ConfigError(f"{where}: the front matter has no closing '---'")


def tool_names(raw: str | list[str]) -> tuple[str, ...]:
    """Tool names from a front matter value (comma-separated or a list), Claude Code's mapped."""
    items = raw if isinstance(raw, list) else raw.split(",")
    names = [CLAUDE_TOOLS.get(t.strip(), t.strip()) for t in items if t.strip()]
    return tuple(dict.fromkeys(names))


def parse_agent(path: Path, scope: str) -> AgentDef:
    """Read one agent file (a ConfigError says what is wrong with it)."""
    try:
        data = path.read_bytes()[: MAX_BYTES + 1]
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the agent file: {e.strerror}") from e
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{path}: an agent file is at most {MAX_BYTES // 1024} KiB")
    keys, body = front_matter(data.decode("utf-8", "replace"), str(path))
    name = keys.get("name", path.stem)
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"{path}: the agent's name must be one word or phrase")
    tools = keys.get("tools")
    model = keys.get("model")
    if model is not None and not isinstance(model, str):
        raise ConfigError(f"{path}: the agent's model must be one model spec")
    description = keys.get("description", "")
    return AgentDef(
        name=name.strip(),
        description=description if isinstance(description, str) else ", ".join(description),
        tools=tool_names(tools) if tools else None,
        model=None if model is None or model.strip() in INHERIT else model.strip(),
        instructions=body,
        path=str(path),
        scope=scope,
    )


def workspace_trusted(workspace: str | Path) -> bool:
    """Whether the user trusts `workspace` (its `.bubu/config.toml`, agents included) as it is."""
    from bubu.settings import trust_state, workspace_layer

    ws = workspace_layer(workspace)
    return ws is not None and trust_state(ws) == "trusted"


def load_agents(workspace: str | Path, *, trusted: bool | None = None) -> Agents:
    """The agents `workspace` may use: the user's, then the workspace's when it is trusted."""
    found: dict[str, AgentDef] = {}
    ignored: list[str] = []
    for d in user_dirs():
        _read_dir(d, "user", found, ignored)
    files = agent_files(workspace)
    if files:
        if trusted is None:
            trusted = workspace_trusted(workspace)
        if trusted:
            for d in workspace_dirs(workspace):
                _read_dir(d, "workspace", found, ignored)
        else:
            names = ", ".join(p.name for p in files)
            ignored.append(
                f"the workspace's agents ({names}) are ignored: the workspace is not trusted "
                "(`bubu trust` it to use them)"
            )
    return Agents(found=found, ignored=tuple(ignored))


def _read_dir(d: Path, scope: str, found: dict[str, AgentDef], ignored: list[str]) -> None:
    for p in _md_files(d):
        try:
            a = parse_agent(p, scope)
        except ConfigError as e:
            ignored.append(str(e))
            continue
        found[a.name] = a


__all__ = [
    "CLAUDE_TOOLS",
    "AgentDef",
    "Agents",
    "agent_files",
    "front_matter",
    "load_agents",
    "parse_agent",
    "tool_names",
    "workspace_trusted",
]
