"""Text that is safe to print on a terminal: the one place where terminal escapes are neutralised.

A model's text, a command's output, a file name or a session title can hold bytes a terminal
obeys: OSC 52 writes the clipboard, OSC 0 retitles the window, OSC 8 hides a link behind other
text, CSI clears the screen or moves the cursor, a lone carriage return or backspaces overwrite
what was shown, and bidi controls reorder it. Everything the CLI prints passes through
`printable`, which turns each such character into a visible escape (ESC becomes the four
characters `\\x1b`), so a person sees that something was there and the terminal obeys nothing.
Newlines and tabs stay; a CR-LF line end becomes a newline.

It also shows every secret redacted, as the log stores it (`bubu.log.redact.text`): a key the
model prints is not on the screen either.

Because the ESC byte itself (or the C1 introducer) is replaced, a sequence split across two
streamed pieces is neutralised too: each piece can be passed through on its own. JSON output
(`--json`, `--jsonl`) is not altered: JSON escapes control characters by itself.

Colours are never escapes inside such text: the live view of a turn (`bubu.cli.render.shown`)
puts printable text into rich `Text` as plain characters and styles it there, so nothing the
model wrote is read as an escape or as rich markup.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from bubu.log import redact

_CONTROLS = (
    "\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f"  # C0 (but tab and newline), DEL, C1 (U+009B is a CSI)
    "\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069"  # bidi marks, embeddings, isolates
    "\\ud800-\\udfff"  # lone surrogates (undecodable bytes): unprintable, and would raise
)
_CONTROL = re.compile(f"[{_CONTROLS}]")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` safe to print on a terminal: every control, escape and bidi character becomes a
    visible escape like `\\x1b`; newlines and tabs stay (a CR-LF becomes a newline); secrets are
    shown redacted."""
    return _CONTROL.sub(_escape, redact.text(text).replace("\r\n", "\n"))


def one_line(text: str, width: int | None = None) -> str:
    """`text` made printable on one line, runs of whitespace folded, cut to `width` with `…`."""
    flat = " ".join(printable(text).split())
    return flat if width is None or len(flat) <= width else flat[: width - 1] + "…"


_ANSI: re.Pattern[str] | None = None


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except Exception:  # broad as click's own test: any stream that cannot say is no terminal
        return False


def plain_echo(text: str = "", *, err: bool = False) -> None:
    """One line on stdout (or stderr), as `click.echo` writes a string: the newline added, ANSI
    escapes stripped where the stream is no terminal, flushed."""
    global _ANSI
    file = sys.stderr if err else sys.stdout
    if file is None:  # no standard stream attached
        return
    out = text + "\n"
    if "\x1b" in out and not _isatty(file) and not type(file).__module__.startswith("ipykernel."):
        if _ANSI is None:
            _ANSI = re.compile(r"\033\[[0-?]*[ -/]*[@-~]")  # click's own pattern
        out = _ANSI.sub("", out)
    file.write(out)
    file.flush()


def echo(text: str = "", *, err: bool = False) -> None:
    """`click.echo` of `text` made printable: for lines that carry no styling of their own."""
    plain_echo(printable(text), err=err)


__all__ = ["echo", "one_line", "plain_echo", "printable"]
