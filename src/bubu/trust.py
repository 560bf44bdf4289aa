"""Which workspaces the user trusts to choose who acts: `$BUBU_HOME/trust.json` (mode 0600).

A workspace's `.bubu/config.toml` comes with the repository. Its keys that choose who acts (the
model, the fallback models, the server, the MCP servers) count only once the user has trusted it,
and the trust is recorded with the sha-256 digest of the file and of every file it names for
such a key, so any change to them revokes the trust without a word from the repository.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bubu.errors import ConfigError

FILE_NAME = "trust.json"
VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One answer about one workspace: trusted or declined, for the files with `digest`."""

    workspace: str
    digest: str
    trusted: bool
    at: str


def trust_file() -> Path:
    """`$BUBU_HOME/trust.json` (BUBU_HOME defaults to ~/.bubu)."""
    home = Path(os.environ.get("BUBU_HOME") or Path.home() / ".bubu").expanduser()
    return home / FILE_NAME


def digest(files: Iterable[Path]) -> str:
    """The sha-256 over each file's path and bytes, in order (a missing file counts as empty
    with a marker, so creating it later changes the digest too)."""
    h = hashlib.sha256()
    for path in files:
        h.update(str(path).encode() + b"\0")
        try:
            h.update(b"F" + hashlib.sha256(path.read_bytes()).digest())
        except FileNotFoundError:
            h.update(b"-")
        except OSError as e:
            raise ConfigError(f"{path}: cannot read it to check the workspace's trust: {e}") from e
    return h.hexdigest()


def entries() -> dict[str, Entry]:
    """Every recorded answer, by workspace path (none when the file does not exist)."""
    path = trust_file()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"{path}: cannot read the trusted workspaces ({e}); fix or delete the file "
            "(`bubu trust DIR` records them again)"
        ) from None
    raw = data.get("workspaces") if isinstance(data, dict) else None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: not a trust file; fix or delete it")
    out: dict[str, Entry] = {}
    for ws, row in raw.items():
        if isinstance(row, dict) and isinstance(row.get("digest"), str):
            out[ws] = Entry(
                workspace=ws,
                digest=row["digest"],
                trusted=row.get("trusted") is True,
                at=str(row.get("at", "")),
            )
    return out


def answer(workspace: str) -> Entry | None:
    """The recorded answer for `workspace` (an absolute path), whatever its digest."""
    return entries().get(workspace)


def is_trusted(workspace: str, current: str) -> bool:
    """True when the user trusted `workspace` with the files whose digest is `current`."""
    e = answer(workspace)
    return e is not None and e.trusted and e.digest == current


def record(workspace: str, current: str, *, trusted: bool) -> Entry:
    """Record the user's answer for `workspace` with its files' digest (written atomically)."""
    all_ = entries()
    entry = Entry(
        workspace=workspace,
        digest=current,
        trusted=trusted,
        at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    all_[workspace] = entry
    _write(all_)
    return entry


def revoke(workspace: str) -> bool:
    """Forget `workspace`'s answer; False when there was none."""
    all_ = entries()
    if all_.pop(workspace, None) is None:
        return False
    _write(all_)
    return True


def _write(all_: dict[str, Entry]) -> None:
    path = trust_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    body = {
        "version": VERSION,
        "workspaces": {
            ws: {"digest": e.digest, "trusted": e.trusted, "at": e.at}
            for ws, e in sorted(all_.items())
        },
    }
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".trust.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(body, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # undone, then re-raised: Ctrl-C and exits too
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


__all__ = [
    "Entry",
    "answer",
    "digest",
    "entries",
    "is_trusted",
    "record",
    "revoke",
    "trust_file",
]
