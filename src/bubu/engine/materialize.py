"""A fleet worker's own copy of a session's workspace, materialized from the store.

A worker started with a workspace root (`bubu worker --workspaces DIR`) runs every session in
`DIR/<session id>`: when that directory is not there yet, it is written from the session's last
snapshot (`bubu submit --snapshot` records one for a new task), so a session can be continued on a
machine that never had its files. The copy is written beside its place and renamed into it, so a
crash mid-way leaves no half workspace to run in.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import msgspec

from bubu.errors import ConfigError
from bubu.log.store import SessionInfo, Store
from bubu.snapshot import refs
from bubu.snapshot.restore import materialize


def local_workspace(store: Store, info: SessionInfo, root: str | None) -> SessionInfo:
    """`info` with the workspace this machine runs it in: its recorded one without a `root`;
    with one, `root/<session id>`, materialized from the last snapshot when missing."""
    if root is None:
        if not Path(info.workspace).is_dir():
            raise ConfigError(
                f"the workspace {info.workspace} of session {info.id} does not exist on this "
                "machine; run the worker where it does, or give it --workspaces DIR to "
                "materialize it from the session's snapshots"
            )
        return info
    home = Path(root).expanduser().resolve()
    local = home / info.id
    if Path(info.workspace).resolve() == local or local.is_dir():
        return msgspec.structs.replace(info, workspace=str(local))
    records = store.read(info.id)
    snap = refs.snapshot_before(records, records[-1].seq if records else 0)
    if snap is None or snap.tree is None:
        raise ConfigError(
            f"session {info.id} has no workspace snapshot to materialize into {local}; submit "
            "it with `bubu submit --snapshot`, or run the worker where its workspace is"
        )
    home.mkdir(parents=True, exist_ok=True)
    partial = home / f".{info.id}.partial"
    if partial.exists():  # a materialization cut short: start it again
        shutil.rmtree(partial)
    materialize(store.get_object, snap.tree, partial)
    os.rename(partial, local)
    return msgspec.structs.replace(info, workspace=str(local))
