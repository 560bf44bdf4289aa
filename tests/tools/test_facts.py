"""Tools declare how they are shown and whether they run commands (`bubu.toolfacts`); every view
and the permission check read the declaration, and a tool that declares nothing keeps working."""

from __future__ import annotations

from bubu.cli.readviews import _args
from bubu.cli.render import call_label, result_label
from bubu.engine.permissions import Policy, asked_command
from bubu.events import FunctionCall, FunctionResponse, PermissionRequest
from bubu.projections.recovery import label
from bubu.projections.transcript import ToolCard
from bubu.toolfacts import NO_FACTS, ToolFacts, facts_of
from bubu.tools import builtin_tools
from bubu.tools.decorator import tool
from bubu.web.views import _tool_item

GREP = {"pattern": "TODO", "path": "src"}


def test_every_view_names_a_grep_by_its_pattern() -> None:
    """The terminal, `bubu show`, recovery notices and the web UI agree."""
    builtin_tools()
    assert facts_of("grep").headline == "pattern"
    assert call_label(FunctionCall(call_id="c", name="grep", arguments=GREP)) == "grep TODO"
    assert _args("grep", dict(GREP)) == "TODO"
    assert label("grep", GREP) == "grep TODO"
    card = ToolCard(seq=1, call_id="c", name="grep", arguments=dict(GREP))
    assert _tool_item(card).headline == "TODO"


def test_run_command_is_a_command_by_its_declaration() -> None:
    builtin_tools()
    facts = facts_of("run_command")
    assert facts.command_of({"command": "make test"}) == "make test"
    assert facts.call_summary("run_command", {"command": "make test"}) == "run `make test`"
    req = PermissionRequest(
        request_id="r", call_id="c", tool="run_command", summary="run `make test`", reason="asks"
    )
    assert asked_command(req) == "make test"


def test_a_tool_that_declares_nothing_gets_the_defaults() -> None:
    @tool(effect="read_only", name="facts_plain")
    def plain(where: str, path: str = ".") -> str:
        """A tool with no facts."""
        return where + path

    assert facts_of("facts_plain") is NO_FACTS
    assert label("facts_plain", {"where": "x", "path": "a.py"}) == "facts_plain a.py"
    assert NO_FACTS.call_summary("facts_plain", {"path": "a.py"}) == "facts_plain a.py"
    assert NO_FACTS.command_of({"command": "rm -rf /"}) is None
    assert not Policy(allow_commands=("rm -rf /",)).allowed_without_asking(
        "facts_plain", "rm -rf /"
    )


def test_a_declared_command_tool_is_judged_by_the_allow_list_and_shown_by_its_headline() -> None:
    @tool(
        effect="side_effecting",
        name="facts_deploy",
        permission="script",
        facts=ToolFacts(
            headline="target",
            command="script",
            result=lambda text, err: f"deployed: {text.split()[-1]}",
        ),
    )
    def deploy(target: str, script: str) -> str:
        """Deploy."""
        return f"{target} {script} ok"

    facts = facts_of("facts_deploy")
    args = {"target": "staging", "script": "make deploy"}
    assert call_label(FunctionCall(call_id="c", name="facts_deploy", arguments=args)) == (
        "facts_deploy staging"
    )
    assert facts.call_summary("facts_deploy", args) == "run `make deploy`"
    assert Policy(allow_commands=("make deploy",)).allowed_without_asking(
        "facts_deploy", "make deploy", cwd="/"
    )
    result = FunctionResponse(call_id="c", name="facts_deploy", result="line one\nv1.2 ok")
    assert result_label(result) == "deployed: ok"
