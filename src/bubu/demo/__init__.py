"""The embedded demo: a small Python project with a failing test, and a scripted agent that fixes
it.

The script is a real `scripted:` model file; the tools, the log, permissions, and (by default) a
real SIGKILL and the recovery that follows are all the real thing.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

TASK = "The test suite of this project fails. Find the bug, fix it, and make sure the tests pass."

FILES: dict[str, str] = {
    "README.md": "# stats\n\nTiny statistics helpers. Run the tests with `python -m unittest`.\n",
    "stats.py": '''\
"""Tiny statistics helpers."""


def total(values):
    """The sum of the values."""
    result = 0
    for v in values:
        result += v
    return result


def average(values):
    """The arithmetic mean of a non-empty list."""
    if not values:
        raise ValueError("average of an empty list")
    return total(values) / (len(values) - 1)
''',
    "test_stats.py": """\
import unittest

from stats import average, total


class StatsTest(unittest.TestCase):
    def test_total(self):
        self.assertEqual(total([1, 2, 3]), 6)

    def test_average(self):
        self.assertEqual(average([2, 4, 6]), 4)

    def test_average_empty(self):
        with self.assertRaises(ValueError):
            average([])


if __name__ == "__main__":
    unittest.main()
""",
    "check_style.py": '''\
"""A slow style check (it takes a couple of seconds, like real linters do)."""
import pathlib
import sys
import time

time.sleep(2.5)
bad = [p for p in pathlib.Path(".").glob("*.py") if "\\t" in p.read_text()]
print("style ok" if not bad else f"tabs in: {bad}")
sys.exit(1 if bad else 0)
''',
}

FIX_OLD = "return total(values) / (len(values) - 1)"
FIX_NEW = "return total(values) / len(values)"


def commands() -> tuple[str, str]:
    """The two commands the demo agent runs (allow-listed, so no prompt appears)."""
    py = python_command()
    return f"{py} -m unittest -q", f"{py} check_style.py"


def python_command() -> str:
    """`python3` when that is on the PATH (what a reader would type), else this interpreter."""
    found = shutil.which("python3")
    return "python3" if found else shlex.quote(sys.executable)


def script(crash: bool) -> list[dict[str, object]]:
    """The scripted model's responses, one per model call."""
    tests, style = commands()
    after = (
        "The style check was cut off by the crash, so I can't assume it passed. "
        "I'll check the edit landed, then run the style check and the tests again."
        if crash
        else "Now I'll run the style check and the tests again."
    )
    return [
        {
            "text": "Let me look at the project first.",
            "tool_calls": [{"name": "list_files", "arguments": {}}],
        },
        {
            "text": "I'll read the tests to see what is expected.",
            "tool_calls": [{"name": "read_file", "arguments": {"path": "test_stats.py"}}],
        },
        {
            "text": "Where is `average` defined?",
            "tool_calls": [{"name": "grep", "arguments": {"pattern": "def average", "path": "."}}],
        },
        {
            "text": "Let me run the tests to see the failure.",
            "tool_calls": [{"name": "run_command", "arguments": {"command": tests}}],
        },
        {
            "thinking": "average([2, 4, 6]) should be 4 but divides by len - 1, giving 6. "
            "Fix the divisor.",
            "text": "`average` divides by `len(values) - 1`; the mean divides by `len(values)`. "
            "Fixing it, and running the slow style check at the same time.",
            "delay_s": 0.3,
            "tool_calls": [
                {
                    "name": "edit_file",
                    "arguments": {"path": "stats.py", "old": FIX_OLD, "new": FIX_NEW},
                },
                {"name": "read_file", "arguments": {"path": "test_stats.py"}},
                {"name": "run_command", "arguments": {"command": style}},
            ],
        },
        {
            "text": after,
            "tool_calls": [
                {"name": "grep", "arguments": {"pattern": "len\\(values\\)", "path": "stats.py"}},
                {"name": "run_command", "arguments": {"command": f"{style} && {tests}"}},
            ],
        },
        {
            "text": "All tests pass. The bug was an off-by-one divisor in `average` "
            "(`len(values) - 1` instead of `len(values)`); I fixed it in stats.py and verified "
            "with the style check and the full test suite."
        },
    ]


def make_workspace(root: Path) -> Path:
    """Write the demo project into `root` (created) and return it."""
    root.mkdir(parents=True, exist_ok=True)
    for name, text in FILES.items():
        (root / name).write_text(text)
    return root


def write_script(path: Path, crash: bool) -> Path:
    """Write the scripted model file."""
    path.write_text("".join(json.dumps(line) + "\n" for line in script(crash)))
    return path
