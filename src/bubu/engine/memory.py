"""Reading a workspace's memory from the store: every session of that workspace, folded."""

from __future__ import annotations

import os

from bubu.log.store import SessionInfo, Store
from bubu.projections.memory import MEMORY_KINDS, Memory, Note, fold_workspace


def same_workspace(a: str, b: str) -> bool:
    """Whether two workspace paths name one directory (symlinks resolved)."""
    return os.path.realpath(a) == os.path.realpath(b)


def workspace_sessions(store: Store, workspace: str) -> list[SessionInfo]:
    """The sessions of the store whose workspace is `workspace`."""
    return [s for s in store.sessions() if same_workspace(s.workspace, workspace)]


def workspace_memory(store: Store, workspace: str) -> dict[str, Note]:
    """The live notes of a workspace, over every session of it in the store."""
    return memory_of(store, workspace).live


def memory_of(store: Store, workspace: str) -> Memory:
    """A workspace's live notes and the imported ones that wait for `bubu memory accept`."""
    sessions = workspace_sessions(store, workspace)
    return fold_workspace((s.id, store.read(s.id, kinds=MEMORY_KINDS)) for s in sessions)
