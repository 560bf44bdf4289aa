"""A session's sub-agents as `bubu show`, `bubu status` and the web UI list them: a tree read
from the store (each child's own log says what a running one has spent so far)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bubu.errors import UnknownSession
from bubu.events import Record
from bubu.log.store import Store
from bubu.projections.children import RUNNING, fold_children, report

MAX_DEPTH = 8


def children_json(store: Store, records: Sequence[Record], depth: int = 0) -> list[dict[str, Any]]:
    """The session's children (and theirs), each with its state and what it spent; a running
    child's spend is read from its own log."""
    out: list[dict[str, Any]] = []
    for c in fold_children(records).values():
        try:
            recs = store.read(store.session(c.session).id)
        except UnknownSession:
            recs = []
        live = report(recs)
        running = c.state == RUNNING
        out.append(
            {
                "session": c.session,
                "call_id": c.call_id,
                "agent": c.agent,
                "model": c.model,
                "branch": c.branch,
                "state": RUNNING if running else c.state,
                "tokens": live.tokens if running else c.tokens,
                "cost_usd": live.cost_usd if running else c.cost_usd,
                "children": children_json(store, recs, depth + 1) if depth < MAX_DEPTH else [],
            }
        )
    return out


def spent(children: Sequence[dict[str, Any]]) -> tuple[int, float]:
    """Tokens and USD the children spent (a finished child's figure includes its own children)."""
    tokens, cost = 0, 0.0
    for c in children:
        tokens += int(c["tokens"])
        cost += float(c["cost_usd"])
    return tokens, cost


def running_count(children: Sequence[dict[str, Any]]) -> int:
    """How many children (at any depth) are running."""
    return sum((c["state"] == RUNNING) + running_count(c["children"]) for c in children)


def tree_lines(children: Sequence[dict[str, Any]], indent: str = "  ") -> list[str]:
    """One line per child, nested under its parent."""
    lines: list[str] = []
    for c in children:
        agent = f" ({c['agent']})" if c["agent"] else ""
        branch = f" branch {c['branch']}" if c["branch"] else ""
        lines.append(
            f"{indent}└ {c['session']}{agent}  {c['state']}  {c['tokens']:,} tokens{branch}"
        )
        lines += tree_lines(c["children"], indent + "  ")
    return lines


__all__ = ["children_json", "running_count", "spent", "tree_lines"]
