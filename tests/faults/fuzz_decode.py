"""An atheris (libFuzzer) target: `codec.decode` on any bytes raises only Bubu errors.

Run by `test_fuzz.py` as ``python fuzz_decode.py CORPUS -runs=N -seed=S -max_len=L``; libFuzzer
mutates the seed corpus (real canonical events) under coverage guidance, and any other exception
is a crash that ends the run with a non-zero status and the input that caused it.
"""

from __future__ import annotations

import contextlib
import sys

import atheris  # type: ignore[import-untyped]

with atheris.instrument_imports():
    from bubu.errors import BubuError
    from bubu.log import codec


def one_input(data: bytes) -> None:
    """Decode `data`; a Bubu error is a refusal, anything else a bug."""
    try:
        event = codec.decode(data)
    except BubuError:
        return
    with contextlib.suppress(codec.InvalidEvent):
        codec.encode(event)


def main() -> None:
    """Fuzz until libFuzzer's -runs budget is spent (it exits the process)."""
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
