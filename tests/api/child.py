"""The child of the crash tests: run one scripted turn through the Python API, with MCP servers.

Usage: ``python child.py DB WORKSPACE SCRIPT MCP_CONFIG`` with ``BUBU_FAILPOINT`` set, so the
process SIGKILLs itself mid-turn. It prints the session id (flushed) before the turn starts.
`save_note` is imported by the parent too, so recovery there knows the same tool.
"""

from __future__ import annotations

import sys

from bubu.api import Agent
from bubu.engine.permissions import Policy
from bubu.tools.decorator import tool


@tool(
    effect="provable_write",
    target=lambda args: f"notes/{args['title']}.md",
    content=lambda args: f"# {args['title']}\n\n{args['text']}\n".encode(),
)
def save_note(title: str, text: str) -> str:
    """Save a note in notes/TITLE.md.

    Args:
        title: The note's title (also its file name).
        text: The body of the note.
    """
    return f"saved notes/{title}.md"


def main() -> None:
    """Start the turn and let the failpoint kill the process."""
    db, ws, script, mcp = sys.argv[1:5]
    agent = Agent(
        model=f"scripted:{script}",
        tools=[save_note],
        mcp=mcp,
        store=db,
        workspace=ws,
        policy=Policy(yes=True),
    )
    run = agent.start("take notes")
    print(run.session, flush=True)
    run.wait()


if __name__ == "__main__":
    main()
