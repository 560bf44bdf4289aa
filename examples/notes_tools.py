"""Custom tools and crash recovery: a provable write survives a crash and is proven, not repeated.

    python examples/notes_tools.py

`save_note` declares its target file and the content it will write, so its dispatch records the
file's hash before and after. The first run "crashes" right after the note is written and before
its outcome is committed (here: an exception no handler catches, standing in for a killed
process). `Agent.recover` then compares the file with the recorded hashes, records the write as
applied without running it again, and lets the model continue.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from bubu import Agent, ToolContext, tool
from bubu.tools import atomic_write

HERE = Path(__file__).resolve().parent


class PowerCut(BaseException):
    """Stands in for the process dying: nothing in the engine catches it."""


crashed = False


@tool(
    effect="provable_write",
    target=lambda args: f"notes/{args['title']}.md",
    content=lambda args: f"# {args['title']}\n\n{args['text']}\n",
)
def save_note(title: str, text: str, ctx: ToolContext) -> str:
    """Save a note as notes/TITLE.md.

    Args:
        title: The note's title, also its file name.
        text: The body of the note.
    """
    global crashed
    path = ctx.workspace / "notes" / f"{title}.md"
    atomic_write(str(path), f"# {title}\n\n{text}\n".encode(), None)
    if not crashed:
        crashed = True
        raise PowerCut
    return f"saved notes/{title}.md"


@tool(effect="side_effecting")
def notify(message: str) -> str:
    """Tell the team (a side effect: after a crash it is never repeated silently)."""
    return f"sent: {message}"


def main() -> None:
    """Crash mid-write, then recover."""
    model = f"scripted:{HERE / 'models' / 'notes.jsonl'}"
    work = Path(tempfile.mkdtemp(prefix="bubu-notes-"))
    with Agent(
        model=model, tools=[save_note, notify], store=work / "bubu.db", workspace=work
    ) as agent:
        try:
            agent.run("write down the plan and tell the team")
        except PowerCut:
            print("the process 'died' after the write, before its outcome was committed")
        session = agent.sessions()[0].id
        result = agent.recover(session)
        assert result.recovery is not None
        for call in result.recovery.calls:
            print(f"recovery: {call.tool} -> {call.decision} ({call.reason})")
        print(f"{result.reason}: {result.text}")
        print((work / "notes" / "plan.md").read_text(), end="")


if __name__ == "__main__":
    main()
