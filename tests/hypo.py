"""How many examples a property test (or a seeded random test) tries: its full count when the slow
tests run too (the full suite, as CI runs it), a few in the quick selection (``-m "not slow"``).

The root conftest decides once per run (`choose`); `BUBU_TEST_EXAMPLES=full` or ``quick``
overrides it. The quick run keeps every property exercised on every change, the full run keeps
its depth.
"""

from __future__ import annotations

import os

QUICK = 20
"""The examples a property tries in the quick selection (at most)."""

_quick = False


def choose(markexpr: str) -> None:
    """Quick when the run leaves the slow tests out, unless BUBU_TEST_EXAMPLES says otherwise."""
    global _quick
    wanted = os.environ.get("BUBU_TEST_EXAMPLES", "")
    _quick = wanted == "quick" or (wanted != "full" and "not slow" in markexpr)


def examples(full: int, *, quick: int = QUICK) -> int:
    """`full`, or at most `quick` when the run is quick."""
    return min(full, quick) if _quick else full
