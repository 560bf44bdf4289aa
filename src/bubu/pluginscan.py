"""Whether an installed distribution may register anything in an entry-point group, told without
`importlib.metadata` (importing it costs a reader about 40 ms, a third of its start).

A read-only command that would list the host's tools (`bubu context`) asks `may_register` first:
when the answer is False, the host's tools are the built-ins alone and their recorded
declarations serve (`bubu.toolspecs`); when True, it takes the whole plugin path
(`bubu.plugins`), which loads the plugins as a run does.

The answer errs one way only. It is False when `BUBU_PLUGINS` is ``none``, or when every
`entry_points.txt` of every distribution on `sys.path` was read, as `importlib.metadata` finds
them, and none names the group but for the built-in lines of Bubu's own distribution. Anything it
cannot read the way `importlib.metadata` would (a zip or an egg on the path, an unreadable file,
a finder of distributions other than the path's own) makes it True.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping

ALLOW_ENV = "BUBU_PLUGINS"
"""Which installed distributions' entry points count: unset, every one; ``none``, none (the
built-ins only); else a comma-separated list of distribution names (`bubu.plugins`)."""

DISTRIBUTION = "bubu-agent"
"""The distribution that registers the built-ins."""


def normalize(dist: str) -> str:
    """A distribution's name as names are compared (PEP 503)."""
    return re.sub(r"[-_.]+", "-", dist).lower()


def allowed_distributions() -> frozenset[str] | None:
    """The distributions `BUBU_PLUGINS` lets register entry points (normalized names), or None
    for every installed one."""
    value = os.environ.get(ALLOW_ENV)
    if value is None:
        return None
    names = {normalize(n.strip()) for n in value.split(",") if n.strip()}
    return frozenset(names - {"none"})


def may_register(group: str, builtin: Mapping[str, str]) -> bool:
    """Whether the installed distributions may register in `group` anything beyond `builtin`
    (name -> value: the lines Bubu's own distribution declares); see the module docstring."""
    if allowed_distributions() == frozenset():  # `none`: the built-ins alone
        return False
    from importlib.machinery import PathFinder

    for finder in sys.meta_path:
        if finder is not PathFinder and getattr(finder, "find_distributions", None) is not None:
            return True
    for entry in sys.path:
        root = entry or "."
        if os.path.basename(root).lower().endswith(".egg"):
            return True
        try:
            children = os.scandir(root)
        except NotADirectoryError:
            return True  # a zip on the path: importlib.metadata reads inside it
        except OSError:
            if os.path.lexists(root):
                return True
            continue  # an entry that does not exist holds nothing
        with children:
            for child in children:
                low = child.name.lower()
                if not low.endswith((".dist-info", ".egg-info")):
                    continue
                if _registers(child.path, low, group, builtin):
                    return True
    return False


def _registers(path: str, low: str, group: str, builtin: Mapping[str, str]) -> bool:
    """Whether the distribution whose metadata is at `path` declares in `group` anything but
    `builtin` (which only Bubu's own may declare)."""
    try:
        with open(os.path.join(path, "entry_points.txt"), encoding="utf-8") as f:
            text = f.read()
    except (FileNotFoundError, NotADirectoryError):
        return False  # no entry points (an .egg-info may be a file: it declares none)
    except (OSError, UnicodeDecodeError):
        return True
    if group not in text:
        return False
    own = normalize(low.rpartition(".")[0].partition("-")[0]) == normalize(DISTRIBUTION)
    section = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            continue
        if section != group:
            continue
        name, _, value = line.partition("=")
        if not own or builtin.get(name.strip()) != value.strip():
            return True
    return False
