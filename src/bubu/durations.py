"""Durations as people write them (`90s`, `10m`, `6h`, `1d`, `1h30m`), read by the command line
and the config files alike."""

from __future__ import annotations

import math
import re

from bubu.errors import ConfigError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
EXAMPLES = "e.g. 90s, 10m, 6h, 1d or 1h30m"


def parse_duration(text: str, *, option: str = "the duration") -> float:
    """Seconds in `text` (`90s`, `10m`, `6h`, `1d`, `1h30m`, or a plain number of seconds);
    anything else, zero, negative or not finite is a ConfigError naming `option`."""
    raw = text.strip().lower()
    seconds: float | None = None
    try:
        seconds = float(raw)
    except ValueError:
        pos, total = 0, 0.0
        for m in _PART.finditer(raw):
            if m.start() != pos:
                break
            total += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if raw and pos == len(raw):
            seconds = total
    if seconds is None:
        raise ConfigError(f"{option} must be a duration ({EXAMPLES}), not {text!r}")
    if not (math.isfinite(seconds) and seconds > 0):
        raise ConfigError(f"{option} must be a duration above zero ({EXAMPLES}), not {text!r}")
    return seconds


__all__ = ["EXAMPLES", "parse_duration"]
