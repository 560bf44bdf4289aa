"""Plugins: model providers and tools registered through Python entry points.

Two entry-point groups make up the seam::

    bubu.providers   NAME = "module:factory"    factory(model, **options) -> Provider
    bubu.tools       NAME = "module:function"   function() -> iterable of Tool

``-m NAME:MODEL`` picks the provider registered as NAME; every registered tool function is called
once per host. Bubu's own providers (scripted, openai, anthropic) and built-in tools come through
the same seam: they are declared as entry points of the ``bubu-agent`` distribution, and the table
`BUILTINS` holds the same lines so that an editable install made before they were declared (whose
metadata lacks them) still finds them.

A name claimed by two distributions is a conflict: resolving it fails with a message naming both,
while every other name keeps working. ``BUBU_PLUGINS`` chooses which installed distributions may
register anything (`ALLOW_ENV`); Bubu's test suite sets it to ``none``, so a plugin installed in
the same environment never changes a result. Tests may also pass `entry_points` explicitly.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast, get_args

from bubu import providerfacts
from bubu.errors import ConfigError
from bubu.pluginscan import ALLOW_ENV, DISTRIBUTION, allowed_distributions, normalize
from bubu.toolspecs import BUILTIN_REGISTRATION

if TYPE_CHECKING:
    from bubu.providers.base import Provider
    from bubu.tools.base import Tool

Group = Literal["bubu.providers", "bubu.tools"]


UNKNOWN = "an unknown package"
"""Who registered an entry point that came without its distribution (one passed in by hand)."""

BUILTINS: Mapping[Group, Mapping[str, str]] = {
    "bubu.providers": providerfacts.ENTRY_POINTS,
    "bubu.tools": BUILTIN_REGISTRATION,
}
"""The built-in registrations (the providers' from their records, `bubu.providerfacts`): the
same lines as the entry points in pyproject.toml."""


class ProviderFactory(Protocol):
    """What a `bubu.providers` entry point names: builds a provider for one model."""

    def __call__(self, model: str, /, **options: Any) -> Provider:
        """The provider for `model`; options it does not know must be ignored."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Plugin:
    """One registration: a name in a group, the object it names and who registered it."""

    group: Group
    name: str
    value: str
    dist: str

    def load(self) -> object:
        """Import the registered object; a broken plugin is a ConfigError naming it."""
        try:
            return metadata.EntryPoint(name=self.name, value=self.value, group=self.group).load()
        except Exception as e:  # any import-time failure of third-party code lands here
            raise ConfigError(
                f"the plugin {self.name!r} ({self.value}, from {self.dist}) failed to load "
                f"({type(e).__name__}: {e}); {_remedy('reinstall or uninstall', self.dist)}"
            ) from e


@dataclass(frozen=True, slots=True, kw_only=True)
class Registry:
    """Every registration of one group, and the names more than one distribution claims."""

    group: Group
    plugins: Mapping[str, Plugin]
    conflicts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def names(self) -> list[str]:
        """The usable names, sorted."""
        return sorted(self.plugins)

    def get(self, name: str, *, what: str) -> Plugin:
        """The registration of `name`; ConfigError when it is unknown or claimed twice."""
        if name in self.conflicts:
            raise ConfigError(
                f"the {what} {name!r} is registered by more than one package "
                f"({', '.join(self.conflicts[name])}); uninstall all but one"
            )
        plugin = self.plugins.get(name)
        if plugin is None:
            known = ", ".join(self.names()) or "none"
            allowed = os.environ.get(ALLOW_ENV)
            pinned = "" if allowed is None else f"; {ALLOW_ENV}={allowed} leaves out the others"
            raise ConfigError(
                f"unknown {what} {name!r}; known: {known} (a plugin adds one through the "
                f"{self.group!r} entry-point group{pinned})"
            )
        return plugin


def _remedy(verb: str, dist: str) -> str:
    return f"{verb} the package that registers it" if dist == UNKNOWN else f"{verb} {dist}"


def _dist_of(ep: metadata.EntryPoint) -> str:
    dist = ep.dist
    return dist.name if dist is not None else UNKNOWN


def installed_entry_points(group: Group) -> list[metadata.EntryPoint]:
    """The installed entry points of `group` from the distributions `BUBU_PLUGINS` allows."""
    allowed = allowed_distributions()
    found = metadata.entry_points(group=group)
    if allowed is None:
        return list(found)
    return [ep for ep in found if normalize(_dist_of(ep)) in allowed]


def registry(group: Group, entry_points: Iterable[metadata.EntryPoint] | None = None) -> Registry:
    """The registrations of `group`: the built-ins, then the installed entry points.

    `entry_points` replaces the installed ones (for tests and embedding); the built-ins are always
    there. An entry point of bubu-agent itself re-declares a built-in and is not a conflict.
    Installed ones come from the distributions `BUBU_PLUGINS` allows (`installed_entry_points`).
    """
    if group not in get_args(Group):
        raise ConfigError(f"unknown plugin group {group!r}; known: {', '.join(get_args(Group))}")
    plugins = {
        name: Plugin(group=group, name=name, value=value, dist=DISTRIBUTION)
        for name, value in BUILTINS[group].items()
    }
    claims: dict[str, list[str]] = {}
    found = installed_entry_points(group) if entry_points is None else entry_points
    for ep in found:
        if ep.group != group:
            continue
        dist = _dist_of(ep)
        known = plugins.get(ep.name)
        if known is not None:
            if normalize(known.dist) == normalize(dist) and known.value == ep.value:
                continue
            claims.setdefault(ep.name, [known.dist]).append(dist)
            continue
        plugins[ep.name] = Plugin(group=group, name=ep.name, value=ep.value, dist=dist)
    for name in claims:
        plugins.pop(name, None)
    return Registry(
        group=group,
        plugins=plugins,
        conflicts={name: tuple(dict.fromkeys(dists)) for name, dists in claims.items()},
    )


def provider_factory(
    name: str, entry_points: Iterable[metadata.EntryPoint] | None = None
) -> ProviderFactory:
    """The factory registered for the provider `name` (the part of a model spec before ':')."""
    plugin = registry("bubu.providers", entry_points).get(name, what="model provider")
    factory = plugin.load()
    if not callable(factory):
        raise ConfigError(
            f"the model provider {name!r} from {plugin.dist} is not callable ({plugin.value}); "
            f"{_remedy('reinstall or uninstall', plugin.dist)}"
        )
    # Checked callable; that it takes (model, **options) is the plugin's promise.
    return cast(ProviderFactory, factory)


def plugin_tools(entry_points: Iterable[metadata.EntryPoint] | None = None) -> list[Tool]:
    """Every tool of every `bubu.tools` registration, built-ins first; names must be unique."""
    from bubu.tools import check_tool

    reg = registry("bubu.tools", entry_points)
    for name in reg.conflicts:
        reg.get(name, what="tool plugin")  # raises, naming the packages
    order = [*BUILTINS["bubu.tools"], *(n for n in reg.names() if n not in BUILTINS["bubu.tools"])]
    tools: list[Tool] = []
    seen: dict[str, str] = {}
    for name in order:
        plugin = reg.plugins[name]
        make = plugin.load()
        try:
            made = list(make()) if callable(make) else None
        except Exception as e:  # a plugin's own failure must name the plugin, not crash the host
            raise ConfigError(
                f"the tool plugin {name!r} from {plugin.dist} failed ({type(e).__name__}: {e}); "
                f"{_remedy('fix or uninstall', plugin.dist)}"
            ) from e
        if made is None:
            raise ConfigError(
                f"the tool plugin {name!r} from {plugin.dist} is not callable ({plugin.value}); "
                f"{_remedy('reinstall or uninstall', plugin.dist)}"
            )
        for t in made:
            check_tool(t, where=f"the tool plugin {name!r} from {plugin.dist}")
            if t.name in seen:
                raise ConfigError(
                    f"two tools are named {t.name!r} (from {seen[t.name]} and {plugin.dist}); "
                    "uninstall one of them"
                )
            seen[t.name] = plugin.dist
            tools.append(t)
    return tools


__all__ = [
    "ALLOW_ENV",
    "BUILTINS",
    "DISTRIBUTION",
    "Group",
    "Plugin",
    "ProviderFactory",
    "Registry",
    "allowed_distributions",
    "installed_entry_points",
    "plugin_tools",
    "provider_factory",
    "registry",
]
