"""What keeps the tests' results independent of what else is installed beside Bubu.

The root conftest sets `BUBU_PLUGINS=none` for the whole test session, so a third-party plugin
installed in the same environment (say, `pip install ./examples/plugin`) registers nothing in
the tests or in the `bubu` processes they start. Tests that install a plugin of their own name it
in that variable; `environ` keeps it in the clean environments subprocess tests build.
"""

from __future__ import annotations

import os

from bubu.plugins import ALLOW_ENV

ONLY_BUILTINS = "none"


def pin_plugins() -> None:
    """Let no installed distribution register plugins, in this process and those it starts."""
    os.environ[ALLOW_ENV] = ONLY_BUILTINS


def environ(*drop: str) -> dict[str, str]:
    """This process's environment without the variables whose names start with any of `drop`,
    except the plugin pin, which stays."""
    return {k: v for k, v in os.environ.items() if k == ALLOW_ENV or not k.startswith(drop)}
