"""Bounded context: offloading large tool results and compaction checkpoints (DESIGN §6)."""

from bubu.context.policy import ContextPolicy

__all__ = ["ContextPolicy"]
