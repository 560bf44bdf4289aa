"""Bounded context: offloading large tool results and compaction checkpoints (DESIGN §6)."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bubu.context.policy import ContextPolicy


def __getattr__(name: str) -> Any:
    # On first use: a reader that needs only `bubu.context.quota` does not load the policy.
    if name == "ContextPolicy":
        from bubu.context.policy import ContextPolicy

        return ContextPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ContextPolicy"]
