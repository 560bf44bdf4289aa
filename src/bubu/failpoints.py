"""Crash-test failpoints: `BUBU_FAILPOINT=name[@N][,name[@N]…]` SIGKILLs this process at that point.

`name@N` fires on the N-th time the point is reached (default the first). Names are listed in
`NAMES`; an unknown name is a configuration error, so a typo never silently disables a test.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from bubu.errors import ConfigError

NAMES = frozenset(
    {
        "before_dispatch",
        "after_dispatch",
        "mid_tool",
        "after_tool",
        "after_outcome",
        "before_model_call",
        "mid_model_call",
        "after_model_response",
        "before_turn_end",
        "after_turn_end",
        "mid_recovery",
        "mid_compaction",
        "mid_rewind",
        "mid_snapshot",
    }
)

PAUSES = frozenset({"after_turn_start"})
"""Points where `BUBU_PAUSE=name:SECONDS` holds the process (for a signal to land exactly there)."""

_lock = threading.Lock()
_counts: dict[str, int] = {}
_armed: dict[str, int] | None = None


def _parse(spec: str) -> dict[str, int]:
    armed: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, nth = part.partition("@")
        if name not in NAMES:
            raise ConfigError(
                f"unknown failpoint {name!r} in BUBU_FAILPOINT; known: {', '.join(sorted(NAMES))}"
            )
        try:
            armed[name] = int(nth) if nth else 1
        except ValueError as e:
            raise ConfigError(f"BUBU_FAILPOINT {part!r}: the count after @ must be a number") from e
    return armed


def armed() -> dict[str, int]:
    """The failpoints armed by the environment (parsed once)."""
    global _armed
    if _armed is None:
        _armed = _parse(os.environ.get("BUBU_FAILPOINT", ""))
    return _armed


def hit(name: str) -> None:
    """Reach failpoint `name`: SIGKILL the process if it is armed for this hit."""
    points = armed()
    if not points or name not in points:
        return
    with _lock:
        _counts[name] = _counts.get(name, 0) + 1
        fire = _counts[name] == points[name]
    if fire:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os.kill(os.getpid(), signal.SIGKILL)


def pause(name: str) -> None:
    """Reach pause point `name`: sleep there when `BUBU_PAUSE=name:SECONDS` names it."""
    spec = os.environ.get("BUBU_PAUSE")
    if not spec:
        return
    point, _, seconds = spec.partition(":")
    if point not in PAUSES:
        raise ConfigError(
            f"unknown pause point {point!r} in BUBU_PAUSE; known: {', '.join(sorted(PAUSES))}"
        )
    if point == name:
        try:
            wait = float(seconds)
        except ValueError as e:
            raise ConfigError(f"BUBU_PAUSE {spec!r}: give the seconds after the colon") from e
        time.sleep(min(max(wait, 0.0), 60.0))
