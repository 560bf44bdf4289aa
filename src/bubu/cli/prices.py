"""The price table as the user's config file extends it, for the views that show costs."""

from __future__ import annotations

import os
from pathlib import Path

from bubu.errors import ConfigError


def load_prices() -> None:
    """Price models as the user's config file says (`[prices."provider:model"]`), for views
    that tell $0 from an unknown price before a session's first call."""
    from bubu.pricing import configure_from

    if not _may_name_prices():
        configure_from(None)
        return
    from bubu.settings import resolve

    try:
        found = resolve(workspace=None, flags={}, defaults={}).values.get("prices")
    except ConfigError:
        return  # a broken file is said by the commands that run with it
    configure_from(found.value if found is not None else None)


def _may_name_prices() -> bool:
    """Whether the user's config file (where alone prices are set) could hold a `prices` table:
    reading the settings costs more than most of a listing, and most files set none."""
    home = Path(os.environ.get("BUBU_HOME") or Path.home() / ".bubu").expanduser()
    try:
        return b"prices" in (home / "config.toml").read_bytes()
    except OSError:
        return False
