"""Front matter of Markdown prompt files and skills: the ``---`` block at the top of the file.

Only the subset such files use is read: ``key: value`` lines (a value may be quoted), a list as
``[a, b]`` or as ``- item`` lines under the key, ``#`` comments. Keys are lower-cased with ``_``
for ``-`` (``allowed-tools`` is ``allowed_tools``). Anything else is kept as its text.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Document:
    """A file split into its front matter and its body."""

    meta: dict[str, str | list[str]] = field(default_factory=dict)
    body: str = ""


def _scalar(raw: str) -> str:
    v = raw.strip()
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
        return v[1:-1]
    return v


def _value(raw: str) -> str | list[str]:
    v = raw.strip()
    if v.startswith("[") and v.endswith("]"):
        return [_scalar(x) for x in words(v[1:-1])]
    return _scalar(v)


def parse(text: str) -> Document:
    """Split `text` into front matter and body (no front matter: all of it is the body)."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return Document(body=text)
    meta: dict[str, str | list[str]] = {}
    key: str | None = None
    block = ""  # ">" or "|" while the key's value is a block of indented lines
    for i, line in enumerate(lines[1:], start=1):
        stripped = line.strip()
        if stripped in ("---", "..."):
            return Document(meta=meta, body="".join(lines[i + 1 :]).lstrip("\n"))
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("- ") and key is not None and not block:
            items = meta.get(key)
            meta[key] = [*(items if isinstance(items, list) else []), _scalar(stripped[2:])]
            continue
        if line[:1].isspace() and key is not None:  # a continuation of the key's value
            was = meta.get(key)
            joint = "\n" if block == "|" else " "
            meta[key] = f"{was}{joint}{stripped}" if isinstance(was, str) and was else stripped
            continue
        name, sep, rest = line.partition(":")
        if not sep:
            continue
        key = name.strip().lower().replace("-", "_")
        block = rest.strip()[:1] if rest.strip() in (">", "|", ">-", "|-", ">+", "|+") else ""
        meta[key] = "" if block else _value(rest) if rest.strip() else []
    return Document(body=text)  # no closing line: not front matter


def words(value: str | list[str] | None) -> list[str]:
    """A list value, also when written as one comma-separated string."""
    if value is None:
        return []
    if isinstance(value, list):
        return [v for v in value if v]
    out, depth, cur = [], 0, ""
    for ch in value:  # commas inside parentheses belong to the item: Bash(git add:*, …)
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth <= 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [w for w in [*out, cur.strip()] if w]


def text(value: str | list[str] | None) -> str:
    """A one-line string value ("" when absent or a list)."""
    return value.strip() if isinstance(value, str) else ""


__all__ = ["Document", "parse", "text", "words"]
