"""An agent with the tools of an MCP server (examples/notes_server.py over stdio).

    python examples/mcp_agent.py      # needs the mcp extra; without it, says how to install it

The configuration marks the server trusted, so its tools that declare readOnlyHint are read-only
for Bubu (re-run silently after a crash); `add_note` stays side-effecting and asks for
permission, which the policy here grants (`Policy(yes=True)`, like `bubu run --yes`).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from bubu import Agent, Policy
from bubu.errors import ConfigError

HERE = Path(__file__).resolve().parent


def main() -> None:
    """Connect, show the tools and their effect classes, and run a task."""
    work = Path(tempfile.mkdtemp(prefix="bubu-mcp-"))
    (work / "notes.json").write_text(json.dumps({"groceries": "eggs, flour"}))
    config = {
        "servers": {
            "notes": {
                "command": [sys.executable, str(HERE / "notes_server.py")],
                "env": {"NOTES": str(work / "notes.json")},
                "trusted": True,
            }
        }
    }
    (work / "mcp.json").write_text(json.dumps(config))
    model = f"scripted:{HERE / 'models' / 'mcp.jsonl'}"
    with Agent(
        model=model,
        mcp=work / "mcp.json",
        store=work / "bubu.db",
        workspace=work,
        policy=Policy(yes=True),
    ) as agent:
        for name, t in sorted(agent.tools.items()):
            if name.startswith("notes__"):
                print(f"{name:20} {t.effect}")
        result = agent.run("Add milk to the groceries note.")
        print(f"{result.reason}: {result.text}")
    print(json.loads((work / "notes.json").read_text())["groceries"])


if __name__ == "__main__":
    try:
        main()
    except ConfigError as e:  # the mcp extra missing, say: one line that says what to run
        sys.exit(f"mcp_agent.py: {e}")
