"""The price table as the user's config file extends it, for the views that show costs."""

from __future__ import annotations

from bubu.errors import ConfigError


def load_prices() -> None:
    """Price models as the user's config file says (`[prices."provider:model"]`), for views
    that tell $0 from an unknown price before a session's first call."""
    from bubu.pricing import configure_from
    from bubu.settings import resolve

    try:
        found = resolve(workspace=None, flags={}, defaults={}).values.get("prices")
    except ConfigError:
        return  # a broken file is said by the commands that run with it
    configure_from(found.value if found is not None else None)
