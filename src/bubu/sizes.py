"""Sizes as people write them in flags and config files (``512M``, ``1GiB``, ``500MB``, ``50%``).

One parser for every size option, so ``--store-quota``, ``--max-memory`` and ``--max-file-size``
read the same units the same way: ``K``/``M``/``G``/``T`` and ``KiB``/``MiB``/``GiB``/``TiB`` are
binary, ``KB``/``MB``/``GB``/``TB`` decimal, a plain number is bytes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from bubu.errors import ConfigError

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "kb": 10**3,
    "m": 1 << 20,
    "mib": 1 << 20,
    "mb": 10**6,
    "g": 1 << 30,
    "gib": 1 << 30,
    "gb": 10**9,
    "t": 1 << 40,
    "tib": 1 << 40,
    "tb": 10**12,
}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*|%)")
_OFF = ("off", "none", "unlimited")


def memory_total() -> int:
    """This machine's physical memory in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def parse_size(
    text: str | int,
    *,
    option: str,
    off: bool = False,
    percent_of: Callable[[], int] | None = None,
) -> int:
    """Bytes named by `text`; with `off`, 0 for ``off``; with `percent_of`, a percentage of what
    it returns (e.g. `memory_total`). Anything else is a one-line ConfigError naming `option`."""
    example = "256MiB, 1GiB or off" if off else "50% or 4G" if percent_of else "1G or 500M"
    raw = str(text).strip().lower()
    if off and raw in _OFF:
        return 0
    m = _SIZE.fullmatch(raw)
    percent = m is not None and m.group(2) == "%"
    unit = None if m is None or percent else _UNITS.get(m.group(2))
    if m is None or (unit is None and not (percent and percent_of is not None)):
        raise ConfigError(f"{option} takes a size such as {example}, got {text!r}")
    number = float(m.group(1))
    if percent and percent_of is not None:
        size = int(percent_of() * number / 100) if number <= 100 else 0
        if size <= 0:
            raise ConfigError(f"{option} must be above 0 (and at most 100%), got {text!r}")
        return size
    size = int(number * (unit or 1))
    if size <= 0:
        raise ConfigError(f"{option} must be above 0{' (or off)' if off else ''}, got {text!r}")
    return size
