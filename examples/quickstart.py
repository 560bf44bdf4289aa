"""The Python API in one file: an agent with a custom tool, its result, its log and a follow-up.

    python examples/quickstart.py                    # offline: a scripted model
    BUBU_MODEL=anthropic:claude-sonnet-5-5 python examples/quickstart.py

The scripted model (models/quickstart.jsonl) replays canned responses, so the example runs
without an API key; with BUBU_MODEL set, a real model does the same task its own way.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bubu import Agent, ToolContext, tool
from bubu.events import kind_of

HERE = Path(__file__).resolve().parent


@tool(effect="read_only")
def word_count(path: str, ctx: ToolContext) -> str:
    """Count the words of a text file.

    Args:
        path: The file, relative to the workspace.
    """
    return str(len((ctx.workspace / path).read_text().split()))


def main() -> None:
    """Run a task and a follow-up, and show what the log holds."""
    model = os.environ.get("BUBU_MODEL", f"scripted:{HERE / 'models' / 'quickstart.jsonl'}")
    work = Path(tempfile.mkdtemp(prefix="bubu-quickstart-"))
    (work / "poem.txt").write_text("the log is the runtime\n")
    with Agent(model=model, tools=[word_count], store=work / "bubu.db", workspace=work) as agent:
        result = agent.run("How many words are in poem.txt?")
        print(f"{result.reason}: {result.text}")
        print(f"{result.usage.model_calls} model calls, {result.usage.output_tokens} tokens out")
        for record in agent.events(result.session):
            print(f"  {record.seq:3} {kind_of(record.event)}")
        again = agent.continue_("And how many letters?")
        print(f"follow-up in the same session: {again.session == result.session}: {again.text}")


if __name__ == "__main__":
    main()
