"""delegate and merge_child: sub-agents as child sessions (`bubu.engine.children` runs them).

`delegate` starts a child session in the same store with its own context, tools, model and a
share of the turn's budget, and returns the child's final report. Several delegate calls in one
response run at once. After a crash the call is resumed, never started again: the child session
is keyed by the call, so the same child continues (or its result is read back).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from bubu.errors import ToolError
from bubu.tools.base import ToolContext, ToolResult
from bubu.tools.decorator import tool
from bubu.tools.schema import Arguments


class Budget(Arguments):
    """What a child may spend (each at most its share of what the parent has left; 0: no cap)."""

    tokens: Annotated[int, "Tokens (in + out)."] = 0
    cost: Annotated[float, "USD."] = 0.0
    seconds: Annotated[float, "Running time."] = 0.0


class DelegateArgs(Arguments):
    """The arguments of delegate."""

    task: Annotated[str, "What the sub-agent should do and report, self-contained."]
    agent: Annotated[str, "A named agent (.bubu/agents/NAME.md); '': a general one."] = ""
    tools: Annotated[list[str], "Tool names it may use (default: the agent's, else yours)."] = (
        msgspec.field(default_factory=list)
    )
    model: Annotated[str, "provider:model (default: the agent's, else yours)."] = ""
    budget: Annotated[Budget, "A cap on what it spends."] = msgspec.field(default_factory=Budget)
    isolation: Annotated[
        Literal["none", "worktree"],
        "worktree: it works in its own git worktree and branch; merge it with merge_child.",
    ] = "none"


def _children(ctx: ToolContext) -> ToolResult | None:
    if ctx.children is None:
        raise ToolError("sub-agents are not available here; do the work yourself")
    return None


@tool(
    effect="side_effecting",
    name="delegate",
    description=(
        "Start a sub-agent: a child session with its own context that does `task` and reports "
        "back; its final report is this call's result. Call delegate several times in one "
        "response to run sub-agents in parallel. Give the task everything it needs: the "
        "sub-agent does not see this conversation."
    ),
)
def delegate(args: DelegateArgs, ctx: ToolContext) -> ToolResult:
    """delegate{task, agent?, tools?, model?, budget?, isolation?}: run a sub-agent."""
    _children(ctx)
    assert ctx.children is not None
    return ctx.children.delegate(ctx.call_id, msgspec.to_builtins(args))


class MergeArgs(Arguments):
    """The arguments of merge_child."""

    child: Annotated[str, "The sub-agent's session id (from its delegate result)."]


@tool(
    effect="side_effecting",
    name="merge_child",
    description=(
        "Apply the changes a sub-agent made in its own worktree (isolation: worktree) to this "
        "workspace, as uncommitted changes."
    ),
)
def merge_child(args: MergeArgs, ctx: ToolContext) -> ToolResult:
    """merge_child{child}: bring a finished sub-agent's branch into the workspace."""
    _children(ctx)
    assert ctx.children is not None
    return ctx.children.merge(msgspec.to_builtins(args))


__all__ = ["Budget", "DelegateArgs", "MergeArgs", "delegate", "merge_child"]
