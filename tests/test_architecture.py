"""The layering rules of STYLE.md, checked rather than hoped for."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "bubu"

PURE = [
    "bubu.projections.turn",
    "bubu.projections.context",
    "bubu.projections.status",
    "bubu.projections.transcript",
    "bubu.projections.recovery",
    "bubu.projections.rewind",
    "bubu.projections.facts",
    "bubu.projections.children",
    "bubu.projections.request",
    "bubu.projections.processes",
    "bubu.projections.views",
    "bubu.context.compaction",
    "bubu.engine.decide",
    "bubu.engine.choices",
    "bubu.engine.attempts",
    "bubu.engine.backoff",
]

FORBIDDEN = [
    "sqlite3",
    "subprocess",
    "httpx",
    "httpx2",
    "psycopg",
    "socket",
    "bubu.clock",
    "bubu.log.store",
    "bubu.log.sqlite",
    "bubu.log.postgres",
    "bubu.providers",
    "bubu.tools",
    "bubu.engine.driver",
    "bubu.failpoints",
    "bubu.log",
    "random",
]

UNCLEAN = {
    "time",
    "random",
    "secrets",
    "uuid",
    "datetime",
    "os",
    "threading",
    "bubu.clock",
    "bubu.ids",
}
"""What a pure module never imports itself (the standard library may load some of them anyway):
the clock, randomness, identifiers, the environment, threads."""


def _loaded_after_import(module: str) -> set[str]:
    code = f"import sys, json; import {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_import_no_io(module: str) -> None:
    """Projections and the decide step pull in no store, provider, tool, process, socket or
    clock."""
    loaded = _loaded_after_import(module)
    bad = sorted(m for m in loaded for f in FORBIDDEN if m == f or m.startswith(f + "."))
    assert bad == [], f"{module} imports {bad}"


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_read_no_clock_and_draw_no_randomness(module: str) -> None:
    """The source of each pure module imports no clock, randomness, ids, environment or threads."""
    import ast

    path = SRC.parent / (module.replace(".", "/") + ".py")
    imported: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            imported.add(node.module)
            imported.update(f"{node.module}.{a.name}" for a in node.names)
    assert sorted(imported & UNCLEAN) == [], f"{module} imports {sorted(imported & UNCLEAN)}"


def test_inspecting_the_next_request_builds_no_runner() -> None:
    """`bubu context`, the web UI and the API project the request; they load no driver (no
    lease, no thread pool, no MCP servers)."""
    loaded = _loaded_after_import("bubu.engine.inspect")
    assert "bubu.engine.driver" not in loaded
    assert "concurrent.futures.thread" not in loaded


def test_the_compactor_plans_without_reaching_into_the_runner() -> None:
    """The compactor decides and returns a plan; `engine.compacting` carries it out."""
    assert "Runner" not in (SRC / "engine" / "compactor.py").read_text()
    assert "bubu.engine.driver" not in _loaded_after_import("bubu.engine.compactor")


_PARTS = ("modelcall", "toolcalls", "compacting", "hookpoints", "blobs")


@pytest.mark.parametrize("module", _PARTS)
def test_the_runners_parts_are_handed_what_they_need(module: str) -> None:
    """The model call, the tool calls, the compaction and the hooks are given what they need
    (the run's state, the appender, the stop, the blob reader) as narrow Protocols or as the
    parts themselves: they never load the driver, name the runner, nor reach into private state."""
    assert "bubu.engine.driver" not in _loaded_after_import(f"bubu.engine.{module}")
    source = (SRC / "engine" / f"{module}.py").read_text()
    assert "Runner" not in source
    for name in ("state", "log", "stops", "blobs"):
        assert f"self.{name}._" not in source


def _protocols() -> list[tuple[str, int]]:
    """(name, members) of every Protocol of the engine, members inherited included."""
    classes: dict[str, tuple[list[str], int]] = {}
    for path in sorted((SRC / "engine").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                own = [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AnnAssign)]
                classes[node.name] = ([ast.unparse(b) for b in node.bases], len(own))

    def members(name: str) -> int:
        bases, own = classes[name]
        return own + sum(members(b) for b in bases if b in classes)

    return [(n, members(n)) for n, (bases, _) in classes.items() if "Protocol" in bases]


def test_the_runners_views_are_narrow() -> None:
    """Each view a part of the runner is handed is small: a wide one would be the runner again."""
    wide = [(name, n) for name, n in _protocols() if n > 11]
    assert not wide
    assert {"RunState", "Appender", "Stops", "BlobReader"} <= {name for name, _ in _protocols()}


def test_the_checkpoint_view_kind_is_the_one_verify_checks() -> None:
    from bubu.context.compaction import VIEW_KIND
    from bubu.log.verify import CHECKPOINT_VIEW

    assert VIEW_KIND == CHECKPOINT_VIEW


def test_every_event_kind_is_handled_by_the_transcript() -> None:
    """Each content kind and note kind of the vocabulary appears in the transcript projection."""
    from bubu import events

    text = (SRC / "projections" / "transcript.py").read_text()
    notes = [n.__name__ for n in events.Note.__args__]
    contents = [c.__name__ for c in events.Content.__args__]
    missing = [n for n in notes + contents if n not in text and n not in ("ModelRequestNote",)]
    assert missing == []


def _imports(path: Path) -> set[str]:
    """The bubu modules `path` imports, at its top or inside a function (a lazy import is still a
    dependency), leaving out imports made for the type checker only."""
    import ast

    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for child in node.body for n in ast.walk(child))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in found if m == "bubu" or m.startswith("bubu.")}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_nothing_below_the_cli_imports_the_cli() -> None:
    """The command line sits on top: the engine, the settings, the web UI and the API never
    reach up into `bubu.cli` (only `python -m bubu` starts it)."""
    entry = {SRC / "__main__.py"}
    bad = sorted(
        f"{_module_name(p)} imports {m}"
        for p in SRC.rglob("*.py")
        if (SRC / "cli") not in p.parents and p not in entry
        for m in _imports(p)
        if m == "bubu.cli" or m.startswith("bubu.cli.")
    )
    assert bad == []


def test_the_cli_modules_import_one_another_without_a_cycle() -> None:
    """No two CLI modules need each other (a cycle that lazy imports hide is still one)."""
    import graphlib

    paths = {_module_name(p): p for p in (SRC / "cli").rglob("*.py")}
    graph = {
        name: {m for m in _imports(p) if m in paths and m != name} for name, p in paths.items()
    }
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as e:
        pytest.fail(f"the CLI modules import one another in a cycle: {' -> '.join(e.args[1])}")
    assert set(order) == set(paths)


FRONT_ENDS = ["api.py", "cli/agentcmds.py", "cli/fleetcmds.py", "web/runs.py", "engine/worker.py"]
"""The modules where the CLI, the Python API, the web UI and the fleet worker build their hosts."""
BUILDS_HOSTS = {"api.py", "cli/agentcmds.py", "web/runs.py", "engine/worker.py"}

ASSEMBLED = {
    "bubu.providers.resolve": "a provider",
    "bubu.tools.builtin_tools": "the built-in tools",
    "bubu.tools.registered_tools": "the registered tools",
    "bubu.tools.host_tools": "the host's tools",
    "bubu.tools.tool_table": "a tool table",
    "bubu.tools.mcp.connect": "the MCP servers' tools",
    "bubu.notify.wrap": "the notifying observer",
}
"""What only `bubu.engine.assemble` builds for a host."""

HOST_BUILDERS = {
    "engine/assemble.py",
    "engine/children.py",  # a sub-agent's host, derived from its parent's runner
    "cli/rewindcmd.py",  # a host with no model and no tools, to rewind a log
}


def test_every_front_end_assembles_its_host_in_one_place() -> None:
    """The CLI, the web UI, the Python API and the fleet worker build their hosts with
    `bubu.engine.assemble` and none of its parts (a provider, the tools, the observer) by hand,
    so that a setting reaches a turn the same way whichever of them starts it."""
    import ast

    bad: list[str] = []
    for rel in FRONT_ENDS:
        path = SRC / rel
        imported = _imports(path)
        bad += [
            f"{rel} builds {what} itself ({m})" for m, what in ASSEMBLED.items() if m in imported
        ]
        if rel in BUILDS_HOSTS and not any(m.startswith("bubu.engine.assemble") for m in imported):
            bad.append(f"{rel} does not use bubu.engine.assemble")
    for path in SRC.rglob("*.py"):
        rel = str(path.relative_to(SRC))
        calls = [
            n
            for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "Host"
        ]
        if calls and rel not in HOST_BUILDERS:
            bad.append(f"{rel} constructs a Host (use bubu.engine.assemble.assemble_host)")
    assert bad == []
