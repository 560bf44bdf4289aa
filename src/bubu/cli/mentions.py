"""``@path`` in a chat message: completed from the workspace's files at the prompt, and each
mentioned file given to the model as a `read_file` call the host makes (`start_turn(reads=…)`),
recorded in the log like any call, so the log holds what the model was shown."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from prompt_toolkit.completion import CompleteEvent, Completer, Completion
from prompt_toolkit.document import Document

MENTION = re.compile(r"(?:(?<=\s)|^)@([^\s@]+)")
MAX_MENTIONS = 10
MAX_COMPLETIONS = 50
SKIP = frozenset({".git", "node_modules", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache"})


def _inside(workspace: str, rel: str) -> str | None:
    """`rel` as a workspace-relative path of a regular file in `workspace` (None otherwise)."""
    root = os.path.realpath(workspace)
    path = os.path.realpath(os.path.join(root, rel))
    if not path.startswith(root + os.sep) or not os.path.isfile(path):
        return None
    return os.path.relpath(path, root)


def mentioned(text: str, workspace: str) -> list[str]:
    """The workspace files `text` mentions as ``@path``, in order, each once (a mention of
    something that is not a file of the workspace stays plain text)."""
    out: dict[str, None] = {}
    for m in MENTION.finditer(text):
        raw = m[1].rstrip(",.;:!?)]}'\"")
        rel = _inside(workspace, raw) if raw else None
        if rel is not None:
            out[rel] = None
        if len(out) >= MAX_MENTIONS:
            break
    return list(out)


class MentionCompleter(Completer):
    """Completes ``@path`` with the workspace's files and directories."""

    def __init__(self, workspace: str) -> None:
        self.workspace = os.path.realpath(workspace)

    def get_completions(
        self, document: Document, complete_event: CompleteEvent
    ) -> Iterable[Completion]:
        """The paths beginning with what follows the ``@`` before the cursor."""
        before = document.text_before_cursor
        word = before.split()[-1] if before and not before[-1].isspace() else ""
        if not word.startswith("@") or "@" in word[1:]:
            return
        typed = word[1:]
        head, _, stem = typed.rpartition("/")
        directory = os.path.realpath(os.path.join(self.workspace, head))
        if directory != self.workspace and not directory.startswith(self.workspace + os.sep):
            return
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            return
        shown = 0
        for e in entries:
            if e.name in SKIP or not e.name.startswith(stem):
                continue
            if e.name.startswith(".") and not stem.startswith("."):
                continue
            rel = f"{head}/{e.name}" if head else e.name
            is_dir = e.is_dir()
            yield Completion(
                "@" + rel + ("/" if is_dir else ""),
                start_position=-len(word),
                display=rel + ("/" if is_dir else ""),
            )
            shown += 1
            if shown >= MAX_COMPLETIONS:
                return


__all__ = ["MentionCompleter", "mentioned"]
