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
    """What a child may spend (each at most its share of what the parent has left)."""

    tokens: Annotated[int | None, "Tokens (in + out)."] = None
    cost: Annotated[float | None, "USD."] = None
    seconds: Annotated[float | None, "Running time."] = None


class DelegateArgs(Arguments):
    """The arguments of delegate."""

    task: Annotated[str, "What the sub-agent should do and report, self-contained."]
    agent: Annotated[str | None, "A named agent (.bubu/agents/NAME.md); none: a general one."] = (
        None
    )
    tools: Annotated[
        list[str] | None, "Tool names it may use (default: the agent's, else yours)."
    ] = None
    model: Annotated[str | None, "provider:model (default: the agent's, else yours)."] = None
    budget: Annotated[Budget | None, "A cap on what it spends."] = None
    isolation: Annotated[
        Literal["none", "worktree"] | None,
        "worktree: it works in its own git worktree and branch; merge it with merge_child.",
    ] = None


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
