"""The prompt history of `bubu chat`: `$BUBU_HOME/chat_history`, readable by its owner only, and
never holding what looks like a secret.

An entry is kept out of the file (it stays in memory for this session's Up arrow) when it holds
the value of a secret the process knows (`bubu.secrets.known`: the values of secret environment
variables and the keys providers use), assigns a value to a variable whose name is a secret's
(`OPENAI_API_KEY=…`, `export GITHUB_TOKEN=…`, by `bubu.secrets.is_secret_name`), or carries a
token shaped like a well-known kind of key (`sk-…`, `ghp_…`, `AKIA…`, a PEM private key).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from prompt_toolkit.history import FileHistory

from bubu import secrets
from bubu.log import make_home

HISTORY_FILE = "chat_history"

_ASSIGNMENT = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*[=:]\s*['\"]?[^\s'\"]{4,}")
_KEY_SHAPES = re.compile(
    r"\bsk-[A-Za-z0-9_\-]{16,}"  # OpenAI, Anthropic (sk-ant-…), sk-proj-…
    r"|\b(?:ghp|gho|ghs|ghu|ghr)_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\bAKIA[0-9A-Z]{16}\b"  # AWS access key id
    r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"  # Slack
    r"|\bglpat-[A-Za-z0-9_\-]{20,}"  # GitLab
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
)


def looks_secret(text: str) -> bool:
    """Whether `text` holds a known secret, a secret variable's assignment or a key-shaped token."""
    if any(s.value in text for s in secrets.known()):
        return True
    if any(secrets.is_secret_name(m.group(1)) for m in _ASSIGNMENT.finditer(text)):
        return True
    return _KEY_SHAPES.search(text) is not None


def history_path() -> Path:
    """``$BUBU_HOME/chat_history`` (BUBU_HOME defaults to ~/.bubu)."""
    home = Path(os.environ.get("BUBU_HOME") or Path.home() / ".bubu").expanduser()
    return home / HISTORY_FILE


class ChatHistory(FileHistory):
    """A prompt_toolkit file history that is mode 0600 and skips entries that look secret."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or history_path()
        make_home(self.path.parent)
        fd = os.open(self.path, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o600)
        try:
            os.fchmod(fd, 0o600)  # an older file with a wider mode is narrowed
        finally:
            os.close(fd)
        super().__init__(str(self.path))

    def store_string(self, string: str) -> None:
        """Append `string` to the file unless it looks like it holds a secret."""
        if looks_secret(string):
            return
        super().store_string(string)


__all__ = ["HISTORY_FILE", "ChatHistory", "history_path", "looks_secret"]
