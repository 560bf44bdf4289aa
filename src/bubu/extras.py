"""How to install one of Bubu's optional extras, said for the way this Bubu was installed.

The distribution is `bubu-agent`, but it is not on the package index yet: Bubu installed from a
clone (`pip install .`, `pip install -e .`, or its `src/` on the path) gets the extra from that
clone, a wheel file from that file, a VCS URL from that URL, and only an install from an index
gets `bubu-agent[EXTRA]`. The command names the Python that runs Bubu, so it installs into the
right environment even when that environment is not activated.
"""

from __future__ import annotations

import json
import shlex
import sys
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlparse

Extra = Literal["mcp", "postgres"]
Origin = Literal["clone", "editable", "wheel", "vcs", "index"]

DISTRIBUTION = "bubu-agent"


@dataclass(frozen=True, slots=True, kw_only=True)
class Installed:
    """Where the running Bubu came from: `origin`, and the clone, file or URL it names."""

    origin: Origin
    source: str = ""


def _clone_of(package: Path) -> Path | None:
    """The clone whose `src/bubu` is `package`, if its pyproject.toml is bubu-agent's."""
    root = package.parent.parent
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    name = project.get("project", {}).get("name")
    return root if package.parent.name == "src" and name == DISTRIBUTION else None


def installed(package: Path | None = None) -> Installed:
    """How the Bubu whose package directory is `package` (default: this one) was installed."""
    if package is None:
        package = Path(__file__).resolve().parent
    clone = _clone_of(package)
    if clone is not None:
        # Imported from a clone's sources: an editable install, or `src` on the path.
        return Installed(origin="editable", source=str(clone))
    try:
        raw = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        raw = None
    return from_direct_url(raw)


def from_direct_url(raw: str | None) -> Installed:
    """Where an installed distribution came from, by the `direct_url.json` pip left with it
    (PEP 610); none means an index."""
    try:
        direct = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        direct = {}
    url = str(direct.get("url", ""))
    local = unquote(urlparse(url).path) if url.startswith("file:") else ""
    if "vcs_info" in direct:
        return Installed(origin="vcs", source=f"{direct['vcs_info'].get('vcs', 'git')}+{url}")
    if "dir_info" in direct and local:
        editable = bool(direct["dir_info"].get("editable"))
        return Installed(origin="editable" if editable else "clone", source=local)
    if local:
        return Installed(origin="wheel", source=local)
    return Installed(origin="index")


def install_command(extra: Extra, where: Installed | None = None) -> str:
    """The pip command that adds `extra` to the running Bubu, as it was installed."""
    where = installed() if where is None else where
    pip = f"{shlex.quote(sys.executable)} -m pip install"
    match where.origin:
        case "editable":
            return f"{pip} -e {shlex.quote(f'{where.source}[{extra}]')}"
        case "clone" | "wheel":
            return f"{pip} {shlex.quote(f'{where.source}[{extra}]')}"
        case "vcs":
            return f"{pip} {shlex.quote(f'{DISTRIBUTION}[{extra}] @ {where.source}')}"
        case "index":
            return f"{pip} {shlex.quote(f'{DISTRIBUTION}[{extra}]')}"


def install_hint(extra: Extra) -> str:
    """'install it with `COMMAND`': the end of an error about a missing optional dependency."""
    return f"install it with `{install_command(extra)}`"


__all__ = [
    "Extra",
    "Installed",
    "Origin",
    "from_direct_url",
    "install_command",
    "install_hint",
    "installed",
]
