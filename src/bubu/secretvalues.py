"""Secrets recognised by their value, not their variable's name.

Two detectors, one per path:

- `looks_secret` judges one value of the environment before a command or an MCP server gets it.
  It runs the maintained detectors of `detect-secrets` (provider key prefixes, private-key
  blocks, URLs with a password, high-entropy strings), which cost about 0.1 s to import and
  milliseconds per text: fine once per variable, far too slow for every append.
- `PATTERNS` is what the store runs over every event (`search`): one pass over its bytes finds
  which patterns' leading literals it holds (`_Scanner`, Aho–Corasick), and only those patterns'
  expressions search it; `find` and `sub` do the same for a text with a check of each literal.
  Its entries are the value patterns of detect-secrets 1.5.0's plugins
  (``detect_secrets/plugins/<file>.py``, named per entry), plus the providers detect-secrets
  does not know yet; `tests/redaction/test_values.py` checks they still match the installed
  plugins'. The store path does not judge entropy: hashes, ids and encoded images are
  high-entropy too, and the log must stay readable.

What neither recognises: a short secret, a secret with no known shape and low entropy, a value
transformed (split, reversed, encoded); a variable's *name* still withholds those
(`bubu.secrets.is_secret_name`).
"""

from __future__ import annotations

import re
from functools import cache, lru_cache
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from detect_secrets.plugins.base import RegexBasedDetector
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString


class Pattern(msgspec.Struct, frozen=True, kw_only=True):
    """One shape of secret: `kind` names it in the marker, `source` says where it comes from.
    With `group`, only that group of a match is the secret (the password of a URL)."""

    kind: str
    regex: str
    source: str
    group: int = 0
    ignore_case: bool = False
    whole_run: bool = True
    """Whether a match takes in the rest of its run of token characters (a key longer than the
    pattern's count is replaced whole, not cut)."""


_DS = "detect-secrets 1.5.0, plugins/"
PATTERNS: tuple[Pattern, ...] = (
    Pattern(
        kind="private-key",
        # The headers of private_key.py, taken to the end of the block.
        regex=r"-----BEGIN ((?:DSA|EC|OPENSSH|PGP|RSA|SSH2 ENCRYPTED) )?PRIVATE KEY( BLOCK)?-----"
        r"[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----|\Z)",
        source=_DS + "private_key.py",
        whole_run=False,
    ),
    Pattern(
        kind="putty-key",
        regex=r"PuTTY-User-Key-File-2",
        source=_DS + "private_key.py",
    ),
    Pattern(
        kind="aws-access-key",
        regex=r"A(?:3T[A-Z0-9]|BIA|CCA|KIA|SIA)[0-9A-Z]{16}",
        source=_DS + "aws.py",
    ),
    Pattern(
        kind="azure-storage-key",
        regex=r"AccountKey=[a-zA-Z0-9+\/=]{88}",
        source=_DS + "azure_storage_key.py",
    ),
    Pattern(
        kind="url-password",
        regex=r"://[^:/\?\#\[\]@!\$\&'\(\)\*\+,;=\s\\\"]*:([^:/\?\#\[\]@!\$\&'\(\)\*\+,;=\s\\\"]+)@",
        source=_DS + "basic_auth.py (quotes and backslashes also end it, for JSON; the user may "
        "be empty, as in redis://:PASSWORD@host)",
        group=1,
        whole_run=False,
    ),
    Pattern(
        kind="github-token",
        regex=r"gh[pousr]_[A-Za-z0-9_]{36}",
        source=_DS + "github_token.py",
    ),
    Pattern(
        kind="github-token",
        regex=r"github_pat_[A-Za-z0-9_]{22,}",
        source="GitHub fine-grained personal access tokens (not in detect-secrets 1.5.0)",
    ),
    Pattern(
        kind="gitlab-token",
        regex=r"gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-(?:[0-9a-fA-F]{2}_)?"
        r"[A-Za-z0-9_\-]{20,1024}(?!\w)",
        source=_DS + "gitlab_token.py (its seven prefixes in one, lengths 20 to 1024)",
    ),
    Pattern(
        kind="gitlab-token",
        regex=r"GR1348941[A-Za-z0-9_\-]{20,50}(?!\w)",
        source=_DS + "gitlab_token.py",
    ),
    Pattern(
        kind="jwt",
        regex=r"eyJ[A-Za-z0-9-_=]+\.[A-Za-z0-9-_=]+\.?[A-Za-z0-9-_.+/=]*",
        source=_DS + "jwt.py (taken to the end of the signature)",
    ),
    Pattern(
        kind="npm-token",
        regex=r"npm_[A-Za-z0-9]{36}",
        source="npm access tokens",
    ),
    Pattern(
        kind="openai-key",
        regex=r"sk-[A-Za-z0-9-_]*[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}",
        source=_DS + "openai.py",
    ),
    Pattern(
        kind="openai-key",
        regex=r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}",
        source="OpenAI project and service-account keys (not in detect-secrets 1.5.0)",
    ),
    Pattern(
        kind="anthropic-key",
        regex=r"sk-ant-[a-z]+\d*-[A-Za-z0-9_-]{20,}",
        source="Anthropic API keys (not in detect-secrets 1.5.0)",
    ),
    Pattern(
        kind="google-api-key",
        regex=r"AIza[0-9A-Za-z_-]{35}",
        source="Google API keys (not in detect-secrets 1.5.0)",
    ),
    Pattern(
        kind="huggingface-token",
        regex=r"hf_[A-Za-z0-9]{34,}",
        source="Hugging Face tokens (not in detect-secrets 1.5.0)",
    ),
    Pattern(
        kind="pypi-token",
        regex=r"pypi-(?:AgEIcHlwaS5vcmc|AgENdGVzdC5weXBpLm9yZw)[A-Za-z0-9-_]{70,}",
        source=_DS + "pypi_token.py (its two prefixes in one)",
    ),
    Pattern(
        kind="sendgrid-key",
        regex=r"SG\.[a-zA-Z0-9_-]{22}\.[a-zA-Z0-9_-]{43}",
        source=_DS + "sendgrid.py",
    ),
    Pattern(
        kind="slack-token",
        regex=r"xox[abposr]-(?:\d+-)+[a-z0-9]+",
        source=_DS + "slack.py (lowercase, as Slack issues them)",
    ),
    Pattern(
        kind="slack-webhook",
        regex=r"https://hooks\.slack\.com/services/T[a-zA-Z0-9_]+/B[a-zA-Z0-9_]+/[a-zA-Z0-9_]+",
        source=_DS + "slack.py",
    ),
    Pattern(
        kind="square-secret",
        regex=r"sq0csp-[0-9A-Za-z\\\-_]{43}",
        source=_DS + "square_oauth.py",
    ),
    Pattern(
        kind="stripe-key",
        regex=r"sk_(?:live|test)_[0-9a-zA-Z]{24,}",
        source=_DS + "stripe.py (test keys too; one pattern per prefix, for speed)",
    ),
    Pattern(
        kind="stripe-key",
        regex=r"rk_(?:live|test)_[0-9a-zA-Z]{24,}",
        source=_DS + "stripe.py (restricted keys)",
    ),
)
"""Value shapes redacted wherever they appear in what is stored."""


_RUN = r"[A-Za-z0-9_\-]*"
_META = frozenset("\\.^$*+?{}[]()|")


def needle(p: Pattern) -> str:
    """The literal every match of `p` starts with, or "" when it has none for certain: a text
    without it cannot hold a match, so the regular expression need not run (or be compiled).

    Read off the start of the regex: plain characters and escaped punctuation, up to the first
    other metacharacter, less the last one when a quantifier follows it (as the engine reads it); ""
    for a pattern with a top-level alternation or that ignores case."""
    if p.ignore_case or _top_level_bar(p.regex):
        return ""
    out: list[str] = []
    r, i = p.regex, 0
    while i < len(r):
        c = r[i]
        if c == "\\" and i + 1 < len(r) and not r[i + 1].isalnum():
            out.append(r[i + 1])
            i += 2
        elif c in _META:
            if c in "?*+{" and out:
                out.pop()  # the last character may be absent, or repeated
            break
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _top_level_bar(regex: str) -> bool:
    depth, i, in_class = 0, 0, False
    while i < len(regex):
        c = regex[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if regex[i + 1 : i + 2] == "]":
                i += 1  # a "]" right after "[" is a member of the class
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            return True
        i += 1
    return False


_NEEDLES: tuple[tuple[str, bytes], ...] = tuple(
    (n, n.encode()) for n in (needle(p) for p in PATTERNS)
)


def _source(i: int) -> tuple[str, int]:
    p = PATTERNS[i]
    return (f"(?:{p.regex}){_RUN}" if p.whole_run else p.regex), (
        re.IGNORECASE if p.ignore_case else 0
    )


# One search per pattern, not one alternation: each starts with a literal that the regex engine
# scans for quickly, which an alternation of them all defeats (50x slower here). Each is compiled
# on first use, and a text is searched only for the patterns whose leading literal (`needle`) it
# holds: a reader that shows a few short lines compiles none of them.


@cache
def _text_re(i: int) -> re.Pattern[str]:
    regex, flags = _source(i)
    return re.compile(regex, flags)


@cache
def _data_re(i: int) -> re.Pattern[bytes]:
    regex, flags = _source(i)
    return re.compile(regex.encode(), flags)


class _Scanner:
    """Which patterns' leading literals a text holds, found in one pass over it (Aho–Corasick,
    `ahocorasick_rs`), so that only those patterns' expressions search it: each search is the
    regex engine's own scan of the whole text for its literal, about 1 µs per pattern over a 2 KB
    tool result, and most texts hold none of the literals. The patterns whose literal is shorter
    than two characters, or who have none (`needle`), are searched always."""

    def __init__(self) -> None:
        from ahocorasick_rs import BytesAhoCorasick

        of: dict[bytes, list[int]] = {}
        self.always: list[int] = []
        for i, (_, lit) in enumerate(_NEEDLES):
            if len(lit) < 2:
                self.always.append(i)
            else:
                of.setdefault(lit, []).append(i)
        self.literals = list(of)
        self.patterns = [tuple(of[lit]) for lit in self.literals]
        self.automaton = BytesAhoCorasick(self.literals)

    def candidates(self, data: bytes) -> list[int]:
        """The patterns that may match `data`, in `PATTERNS`' order."""
        found = set(self.always)
        for j, _, _ in self.automaton.find_matches_as_indexes(data, overlapping=True):
            found.update(self.patterns[j])
        return sorted(found)


SCAN_UNDER = 32 * 1024
"""The largest text the scan reads: it reports every occurrence of every literal, so a text that
repeats one (``ghghgh…``, a hostile file) makes a list as long as itself; a larger text (a big
result's blob) is searched by every pattern, which the regex engine does in constant memory."""


@cache
def _scanner() -> _Scanner | None:
    try:
        return _Scanner()
    except ImportError:  # a platform without its wheel: every pattern searches every text
        return None


def search(data: bytes) -> str | None:
    """The kind of the first value of a known shape in `data` (an event's canonical bytes, a
    blob), or None."""
    scanner = _scanner() if len(data) <= SCAN_UNDER else None
    for i in range(len(PATTERNS)) if scanner is None else scanner.candidates(data):
        if _data_re(i).search(data) is not None:
            return PATTERNS[i].kind
    return None


def find(text: str) -> str | None:
    """The kind of the first value of a known shape in `text`, or None."""
    for i, (lit, _) in enumerate(_NEEDLES):
        if lit in text and _text_re(i).search(text) is not None:
            return PATTERNS[i].kind
    return None


def sub(text: str, marker: str = "[redacted:{kind}]") -> str:
    """`text` with every value of a known shape replaced by `marker` (``{kind}`` filled in);
    of a URL, only its password."""
    if not text:
        return text
    for i, (lit, _) in enumerate(_NEEDLES):
        if lit not in text:
            continue
        compiled = _text_re(i)
        if compiled.search(text) is None:
            continue
        p = PATTERNS[i]
        shown = marker.format(kind=p.kind)
        group = p.group

        def replace(m: re.Match[str], shown: str = shown, group: int = group) -> str:
            if group == 0 or m.group(group) is None:
                return shown
            start, end = m.span(group)
            whole = m.start()
            return m.group()[: start - whole] + shown + m.group()[end - whole :]

        text = compiled.sub(replace, text)
    return text


# ---- one value of the environment -----------------------------------------------------------

MIN_ENTROPY_CHARS = 20
"""A value shorter than this is never judged by its entropy alone."""
_TOKEN = re.compile(r"[A-Za-z0-9+/=_\-]+")
_HEX = re.compile(r"[0-9a-fA-F]+")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


@cache
def _detectors() -> tuple[list[RegexBasedDetector], Base64HighEntropyString]:
    # Imported on first use (about 0.1 s): only a command's or a server's start needs them.
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.base import RegexBasedDetector
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString

    classes: list[type] = list(get_mapping_from_secret_type_to_class().values())
    regex: list[RegexBasedDetector] = [
        cls()
        for cls in classes
        if issubclass(cls, RegexBasedDetector) and cls.__name__ != "IPPublicDetector"
    ]
    return regex, Base64HighEntropyString()


@lru_cache(maxsize=4096)
def looks_secret(value: str) -> str | None:
    """What kind of secret `value` looks like, or None: a known provider's key, a private-key
    block, a URL with a password (detect-secrets' detectors and `PATTERNS`), or a long token of
    high entropy that is not a hash, a UUID, a path or base64 of readable text."""
    if len(value) < 8:
        return None
    kind = find(value)
    if kind is not None:
        return kind
    regex, entropy = _detectors()
    for plugin in regex:
        found = next(iter(plugin.analyze_string(value)), None)
        if found:
            return str(plugin.secret_type)
    token = value.strip()
    if len(token) < MIN_ENTROPY_CHARS or not _TOKEN.fullmatch(token):
        return None
    if _HEX.fullmatch(token) or _UUID.fullmatch(token) or token.startswith(("/", "-")):
        return None  # a git SHA, a digest, an id, a path, an option
    if not (any(c.isdigit() for c in token) and any(c.isalpha() for c in token)):
        return None
    if _readable_base64(token):
        return None
    score = entropy.calculate_shannon_entropy(token)
    return "high-entropy string" if score >= entropy.entropy_limit else None


def _readable_base64(token: str) -> bool:
    """Whether `token` is base64 of readable text (encoded data, not a random key)."""
    import base64  # judging the environment's values only: the store's path never gets here
    import binascii

    try:
        alt = b"-_" if ("-" in token or "_" in token) else b"+/"
        raw = base64.b64decode(token + "=" * (-len(token) % 4), altchars=alt, validate=False)
    except (binascii.Error, ValueError):
        return False
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return bool(text) and all(ch.isprintable() or ch in "\n\t\r" for ch in text)


__all__ = ["PATTERNS", "Pattern", "find", "looks_secret", "search", "sub"]
