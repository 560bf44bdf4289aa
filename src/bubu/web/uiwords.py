"""An error meant for the command line, said in the web UI's terms: the form has a Model field
and a Workspace field, not `-m` and `-w`."""

from __future__ import annotations

import re

_REWRITES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), words)
    for pattern, words in (
        (
            r"pass -m provider:model \(e\.g\. -m ([^,]+), -m ([^,]+), -m ([^)]+)\)"
            r" or set BUBU_MODEL; without a key, .*$",
            r"fill in the Model field with provider:model (e.g. \1, \2 or \3), or start `bubu ui` "
            r"with BUBU_MODEL set",
        ),
        (r"create it or pass -w DIR", "create it or choose another folder in the Workspace field"),
        (
            r"or pass --base-url to use a local OpenAI-compatible server",
            "or start `bubu ui` with OPENAI_BASE_URL set to use a local OpenAI-compatible server",
        ),
        (
            r"pass --base-url URL to say which server continues it",
            "start `bubu ui` with OPENAI_BASE_URL set to say which server continues it",
        ),
        (
            r"or pass --mcp FILE to continue with other servers",
            "or start `bubu ui --mcp FILE` to continue with other servers",
        ),
        (r'e\.g\. bubu run "([^"]*)"', r'e.g. "\1"'),
    )
)


def ui_words(message: str) -> str:
    """`message` with its command-line advice (`pass -m …`, `pass -w DIR`, `--base-url`) put
    in the terms of the web UI's form."""
    for pattern, words in _REWRITES:
        message = pattern.sub(words, message)
    return message
