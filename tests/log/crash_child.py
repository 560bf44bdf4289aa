"""The child of the crash test: append to one session forever, acknowledging each durable commit.

Usage: `python crash_child.py DB SESSION SEED`. After every append returns it prints
`HIGH_WATER DIGEST` and flushes, so each printed line is a commit the parent may rely on. The
parent kills it with SIGKILL at a random moment; it never stops on its own.
"""

from __future__ import annotations

import random
import sys

from bubu.events import BlobRef, Event, FunctionResponse, Text, make
from bubu.log import codec
from bubu.log.sqlite import SQLiteStore


def _batch(session: str, rng: random.Random, n: int) -> tuple[list[Event], list[bytes]]:
    events: list[Event] = []
    blobs: list[bytes] = []
    for i in range(rng.randint(1, 4)):
        if rng.random() < 0.2:
            data = rng.randbytes(rng.randint(1, 20_000))
            ref = BlobRef(sha256=codec.sha256_hex(data), size=len(data), lines=data.count(b"\n"))
            content: Text | FunctionResponse = FunctionResponse(
                call_id=f"call_{n}_{i}", name="run_command", result="(offloaded)", blob=ref
            )
            blobs.append(data)
        elif rng.random() < 0.5:
            # A call's result, inline: alone in its append it takes the one-statement path.
            content = FunctionResponse(
                call_id=f"call_{n}_{i}", name="grep", result="y" * rng.randint(0, 3000)
            )
        else:
            content = Text(text=f"append {n}.{i} " + "x" * rng.randint(0, 3000))
        events.append(make(session=session, role="model", author="agent", ts=n, content=content))
    return events, blobs


def main() -> None:
    """Append until killed."""
    path, session, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    store = SQLiteStore(path)
    high_water = store.head(session).high_water
    n = 0
    while True:
        n += 1
        events, blobs = _batch(session, rng, n)
        head = store.append(session, events, expect=high_water, durable=True, blobs=blobs)
        high_water = head.high_water
        sys.stdout.write(f"{head.high_water} {head.digest}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
