"""The one vocabulary of session states on the command line, as `bubu status` and the web UI
say them: an open turn is `running` while its runner holds a live lease, `open turn` once it
died (a crash, for `bubu recover`)."""

from __future__ import annotations

from bubu.errors import ConfigError
from bubu.log.store import SessionInfo, Store
from bubu.projections.status import STATES, Shown, Status


def shown_state(store: Store, info: SessionInfo, st: Status) -> Shown:
    """`running` or `open turn` for an open turn (by its lease), else the folded state."""
    from bubu import clock
    from bubu.engine.scope import lease_is_stale

    if st.state != "open":
        return st.state
    now = getattr(store, "now_ms", clock.now_ms)()  # a fleet's leases run on the database clock
    return "open turn" if lease_is_stale(store.current_lease(info.id), now) else "running"


def check_state(value: str | None) -> Shown | None:
    """A `--status` filter, refused in one line unless it is one of STATES."""
    if value is None:
        return None
    for s in STATES:
        if value.strip().lower() == s:
            return s
    raise ConfigError(f"--status takes one of {', '.join(STATES)}; got {value!r}")


__all__ = ["STATES", "Shown", "check_state", "shown_state"]
