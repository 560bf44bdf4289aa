"""Holding a session's lease while a turn runs: renew it every third of its time, and between
renewals look for a stop request from another process (`bubu stop`, a web UI that does not run
this turn). The heartbeat runs on a thread of its own; it ends when the run's stop event is set."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal

from bubu.errors import BubuError, LeaseLost
from bubu.log.store import Lease, Store

STOP_POLL_S = 0.5
"""How often a running turn looks for a stop request from another process."""


def heartbeat(
    store: Store,
    held: Callable[[], Lease],
    renewed: Callable[[Lease], None],
    *,
    ttl_s: float,
    stop: threading.Event,
    request_stop: Callable[[Literal["stopped", "lease_lost"]], None],
) -> None:
    """Keep the lease `held()` until `stop` is set; `renewed` gets each renewal. A stop request for
    this epoch stops the run ("stopped"); a lease taken over stops it too ("lease_lost")."""
    period = ttl_s / 3
    due = time.monotonic() + period
    while not stop.wait(min(STOP_POLL_S, period)):
        try:
            lease = held()
            if time.monotonic() >= due:
                lease = store.renew_lease(lease, ttl_s)
                renewed(lease)
                due = time.monotonic() + period
            now = store.current_lease(lease.session)
            if now is not None and now.epoch == lease.epoch and now.stop_requested:
                request_stop("stopped")
                return
        except LeaseLost:
            request_stop("lease_lost")
            return
        except BubuError:
            # A store that failed (a lock another process holds) is asked again a period later,
            # not at once: each try holds the store's connection for its busy timeout, and the
            # run's own append must get it in between to fail (or succeed) on its own.
            due = max(due, time.monotonic() + period)
            continue


__all__ = ["STOP_POLL_S", "heartbeat"]
