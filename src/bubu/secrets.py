"""Secrets in the environment: which variables are withheld from commands, and which values are
kept out of the log.

A variable is a **secret** when its name (compared case-insensitively) matches `is_secret_name`:

- it contains ``PASSWORD``, ``PASSWD``, ``PASSPHRASE``, ``CREDENTIAL`` or ``WEBHOOK``
  (``PGPASSWORD``, ``DB_PASSWD``, ``GOOGLE_APPLICATION_CREDENTIALS``, ``SLACK_WEBHOOK_URL``);
- one of its words (the parts between underscores or dashes) is ``TOKEN``, ``SECRET``,
  ``APIKEY``, ``PASS``, ``PAT``, ``DSN``, ``PEM``, ``PRIVATE``, ``CREDS`` or ``COOKIE``
  (``GITHUB_TOKEN``, ``CLIENT_SECRET``, ``DB_PASS``, ``GITHUB_PAT``, ``SENTRY_DSN``,
  ``PRIVATE_KEY_PEM``; not ``MAX_TOKENS``);
- its last word is ``KEY``, ``KEYS`` or ``PWD`` and it has more than one word
  (``OPENAI_API_KEY``, ``STRIPE_KEY``, ``MYSQL_PWD``; not ``PWD`` itself);
- it is one of `KNOWN_NAMES`, or it was registered while running (the key a provider actually
  uses, a variable an MCP server's headers expand, a variable whose value looks like a secret).

A variable is also withheld when its **value** looks like a secret, whatever its name
(`bubu.secretvalues.looks_secret`: a provider's key, a private-key block, a URL with a password,
a long high-entropy token). Secret variables are removed from the environment of commands and
MCP servers unless the user passes them on by name (``--env NAME``). Their values — passed on or
not — are replaced by ``[redacted:NAME]`` in every event before it is appended
(`bubu.log.redact`). The values are read from the environment once, when first needed, and only
ever held in memory.

"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterable, Mapping

import msgspec

from bubu import secretvalues
from bubu.hardening import harden_process

MIN_SECRET_CHARS = 8
"""Values shorter than this are withheld but not redacted: ``1`` or ``yes`` would shred the log."""

KNOWN_NAMES = frozenset(
    {"MYSQL_PWD", "PGPASS", "NETRC", "HTPASSWD", "AUTH0_CLIENT_SECRET", "SSHPASS", "RSYNC_PASSWORD"}
)
"""Secret variables whose names the patterns do not catch."""

_SUBSTRINGS = ("PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "WEBHOOK", "SECRET")
_WORDS = frozenset(
    {
        *("TOKEN", "SECRET", "APIKEY", "PASS", "PAT", "DSN", "PEM", "PRIVATE", "CREDS"),
        "COOKIE",
    }
)
_LAST_WORDS = frozenset({"KEY", "KEYS", "PWD", "AUTH", "BEARER", "JWT"})
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_secret_name(name: str) -> bool:
    """Whether the variable `name` holds a secret by the rule above (case-insensitive)."""
    upper = name.upper()
    if upper in KNOWN_NAMES or any(s in upper for s in _SUBSTRINGS):
        return True
    words = [w for w in upper.replace("-", "_").split("_") if w]
    if _WORDS.intersection(words):
        return True
    return len(words) > 1 and words[-1] in _LAST_WORDS


def check_name(name: str) -> str:
    """`name` if it can name an environment variable; ValueError saying why not otherwise."""
    if "=" in name:
        raise ValueError(
            f"{name.split('=', 1)[0]}=… gives a value; --env takes only the name of a variable "
            "already set in the environment"
        )
    if not _NAME.match(name):
        raise ValueError(f"{name!r} is not an environment variable name")
    return name


class Secret(msgspec.Struct, frozen=True):
    """One secret: the variable's name and its value (kept out of every repr)."""

    name: str
    value: str

    def __repr__(self) -> str:
        return f"Secret(name={self.name!r})"


class _Registry:
    """The secrets of this process: taken from the environment once, plus those registered."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_value: dict[str, str] | None = None
        self._names: set[str] = set()
        self.version = 0

    def _ensure(self) -> dict[str, str]:
        by_value = self._by_value
        if by_value is None:
            with self._lock:
                if self._by_value is None:
                    self._by_value = {}
                    self._take(os.environ)
                by_value = self._by_value
        return by_value

    def _take(self, environ: Mapping[str, str]) -> None:
        assert self._by_value is not None
        for name, value in environ.items():
            if is_secret_name(name):
                self._add(name, value)

    def _add(self, name: str, value: str) -> bool:
        assert self._by_value is not None
        self._names.add(name)
        if len(value) < MIN_SECRET_CHARS or value in self._by_value:
            return False
        self._by_value[value] = name
        self.version += 1
        return True

    def reset(self, environ: Mapping[str, str] | None) -> None:
        with self._lock:
            self._by_value, self._names = {}, set()
            self._take(os.environ if environ is None else environ)
            self.version += 1

    def register(self, name: str, value: str) -> None:
        self._ensure()
        with self._lock:
            self._add(name, value)

    def secrets(self) -> tuple[Secret, ...]:
        by_value = self._ensure()
        with self._lock:
            return tuple(Secret(name, value) for value, name in by_value.items())

    def names(self) -> frozenset[str]:
        self._ensure()
        with self._lock:
            return frozenset(self._names)


_registry = _Registry()


def known() -> tuple[Secret, ...]:
    """Every secret value to keep out of the log (at least `MIN_SECRET_CHARS` long)."""
    return _registry.secrets()


def version() -> int:
    """A number that changes whenever the set of secrets does (for caches built from it)."""
    _registry._ensure()
    return _registry.version


def register(name: str, value: str | None) -> None:
    """Add a secret found while running: the key a provider uses, a value an MCP header expands."""
    if value:
        _registry.register(name, value)


def reset(environ: Mapping[str, str] | None = None) -> None:
    """Take the secrets again from `environ` (default: the process environment), forgetting the
    registered ones; for tests and embedding programs that change the environment."""
    _registry.reset(environ)


def withheld(name: str) -> bool:
    """Whether the variable `name` is kept from commands unless passed on by name (by its name,
    or because its value was seen to look like a secret)."""
    return is_secret_name(name) or name in _registry.names()


def withheld_value(name: str, value: str) -> bool:
    """Whether the variable `name` set to `value` is kept from commands unless passed on by name:
    by its name, or by a value that looks like a secret (`secretvalues.looks_secret`)."""
    return withheld(name) or secretvalues.looks_secret(value) is not None


def command_env(
    pass_on: Iterable[str] = (), environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment a command runs with: `environ` (default the process's) without its secret
    variables, except those named in `pass_on`. A secret seen here for the first time (set after
    start-up) is registered, so its value is redacted like the others; and the process is
    hardened first (`harden_process`), so the command cannot read the secret from its parent.
    A variable whose value looks like a secret is withheld and registered the same way."""
    env = os.environ if environ is None else environ
    _judge_values(env)
    harden_process(is_secret=withheld)
    keep = frozenset(pass_on)
    out: dict[str, str] = {}
    for name, value in env.items():
        if withheld_value(name, value):
            register(name, value)
            if name not in keep:
                continue
        out[name] = value
    return out


def _judge_values(env: Mapping[str, str]) -> None:
    """Register each variable whose value looks like a secret, so that `withheld` (and the
    hardening, which knows names only) treats it as one."""
    for name, value in env.items():
        if not withheld(name) and secretvalues.looks_secret(value) is not None:
            register(name, value)


def passed_on(pass_on: Iterable[str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of `pass_on` that are set in `environ` (default the process's), by name
    (for an MCP server about to start: the process is hardened first)."""
    harden_process(is_secret=withheld)
    env = os.environ if environ is None else environ
    return {name: env[name] for name in pass_on if name in env}


__all__ = [
    "KNOWN_NAMES",
    "MIN_SECRET_CHARS",
    "Secret",
    "check_name",
    "command_env",
    "is_secret_name",
    "known",
    "passed_on",
    "register",
    "reset",
    "version",
    "withheld",
    "withheld_value",
]
