"""Places protected by what they are, found by file identity (device and inode), not by name.

- ``$BUBU_HOME`` (``~/.bubu`` unless set) and everything in it: its ``config.toml`` and
  ``mcp.json`` choose the model and the programs a plain ``bubu run`` starts, its ``bubu.db`` is the
  log. Whatever it is called, and however a path reaches it (a symlink, another spelling of the
  same directory, a bind mount), a path below it is seen for what it is.
- The log database a run writes (``--db``, ``BUBU_DB``) and its journal files, wherever they lie.
- The user's home directory's dot-entries (``~/.bashrc``, ``~/.config/…``, ``~/.ssh/``,
  ``~/.local/…``) and ``$XDG_CONFIG_HOME`` / ``$XDG_DATA_HOME`` when they lie elsewhere: the
  programs a person starts read their configuration and start-up files there. This matters when
  the workspace holds the home directory (``bubu run -w ~``); outside the workspace every write asks
  in any case.

A workspace that itself lies inside one of these places is the user's choice to work there
(``bubu run -w ~/.config/nvim``): paths in that workspace are not protected by the place around
it, except ``$BUBU_HOME``, the database and the workspace's own dot-entries of a home it holds.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
from collections.abc import Sequence
from pathlib import Path

Identity = tuple[int, int]
_JOURNALS = ("", "-wal", "-shm", "-journal")


def bubu_home() -> str:
    """``$BUBU_HOME`` (default ``~/.bubu``) with every symlink resolved."""
    return os.path.realpath(Path(os.environ.get("BUBU_HOME") or Path.home() / ".bubu").expanduser())


def store_files(url: str) -> tuple[str, ...]:
    """The files of a store named by `url` (a SQLite path; none for a server or memory)."""
    if "://" in url or url == ":memory:" or url.startswith("memory:"):
        return ()
    return (os.path.abspath(os.path.expanduser(url)),)


def _identity(path: str) -> Identity | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _chain(path: str) -> list[Identity]:
    """The identities of `path`'s prefixes from ``/`` down, as far as they exist."""
    parts = path.split(os.sep)
    out: list[Identity] = []
    for depth in range(1, len(parts) + 1):
        ident = _identity(os.sep.join(parts[:depth]) or os.sep)
        if ident is None:
            break
        out.append(ident)
    return out


@functools.cache
def _account_home(uid: int) -> str | None:
    """The home directory the password database gives `uid` (read once: it is a file read)."""
    with contextlib.suppress(KeyError, OSError):
        return pwd.getpwuid(uid).pw_dir
    return None


def _homes() -> list[str]:
    """The user's home directory as `HOME` says and as the password database says."""
    homes = [os.path.expanduser("~"), _account_home(os.getuid())]
    return list(dict.fromkeys(h for h in homes if h))


def place_reason(path: str, *, root: str, own: Sequence[str] = ()) -> str | None:
    """Why `path` (absolute, normalised) is protected by the place it lies in, or None; `root`
    is the workspace (resolved), `own` the log database's files."""
    if not path.startswith(os.sep):
        return None
    parts = path.split(os.sep)
    chain = _chain(path)
    if not chain:
        return None
    ident = _identity(path) if own else None
    for db in own:
        for suffix in _JOURNALS:
            f = db + suffix
            if os.path.realpath(f) == os.path.realpath(path) or (
                ident is not None and ident == _identity(f)
            ):
                return f"{path} is Bubu's log database ({db}); a write to it would break the log"
    inside = path == root or path.startswith(root.rstrip(os.sep) + os.sep)
    ws = _identity(root)
    # How deep the workspace lies on this path (None: the path is not in it).
    ws_at = chain.index(ws) if inside and ws in chain else None
    bubu = bubu_home()
    home = _identity(bubu)
    at = chain.index(home) if home is not None and home in chain else None
    if at is None and (path == bubu or path.startswith(bubu.rstrip(os.sep) + os.sep)):
        at = len(bubu.split(os.sep)) - 1  # not created yet: a file made there is read all the same
    if at is not None and (ws_at is None or at >= ws_at):
        return (
            f"{path} is in Bubu's home directory ({bubu}), whose config.toml and "
            "mcp.json choose what Bubu runs and whose database is the log"
        )
    for base in _homes():
        hid = _identity(base)
        if hid is None or hid not in chain:
            continue
        at = chain.index(hid) + 1  # the entry of the home directory the path goes through
        if at < len(parts) and parts[at].startswith(".") and (ws_at is None or ws_at < at):
            entry = os.path.join(base, parts[at])
            where = "is a dot-file of" if at == len(parts) - 1 else f"is under {entry} in"
            return (
                f"{path} {where} your home directory, where the programs you start read their "
                "configuration and start-up files"
            )
    for var in ("XDG_CONFIG_HOME", "XDG_DATA_HOME"):
        value = os.environ.get(var)
        xid = _identity(value) if value and os.path.isabs(value) else None
        if xid is not None and xid in chain:
            at = chain.index(xid)
            if ws_at is None or ws_at < at:
                return (
                    f"{path} is in ${var} ({value}), where the programs you start read their "
                    "configuration and start-up files"
                )
    return None
