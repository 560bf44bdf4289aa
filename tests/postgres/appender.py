"""A child process that appends to a PostgreSQL store, driven by the tests in test_processes.py.

`appender.py URL SCHEMA NAME lockstep SESSION` reads commands from stdin, one per line, and answers
each on stdout: `head` (read the head, answer its high-water), `lease` (take the lease, answer its
epoch), `append` (append one event after the head last read, under the lease if held; answer
`ok HW`, `conflict HW` or `lost`), `quit`.

`appender.py URL SCHEMA NAME race SESSIONS THREADS N`: THREADS threads each append N events, one at
a time, round-robin over the comma-separated SESSIONS, re-reading the head and retrying on every
conflict; prints `{"conflicts": C}` as JSON at the end.
"""

from __future__ import annotations

import json
import sys
import threading

from bubu.errors import AppendConflict, LeaseLost
from bubu.events import Text, make
from bubu.log.postgres import PostgresStore
from bubu.log.store import Lease


def lockstep(store: PostgresStore, name: str, session: str) -> None:
    """Answer the parent's commands; the parent keeps two of these in step."""
    seen, n = 0, 0
    lease: Lease | None = None
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "head":
            seen = store.head(session).high_water
            answer = str(seen)
        elif cmd == "lease":
            lease = store.acquire_lease(session, name, 60)
            answer = str(lease.epoch)
        elif cmd == "append":
            n += 1
            ev = make(
                session=session, role="user", author="user", ts=n, content=Text(text=f"{name}-{n}")
            )
            try:
                head = store.append(session, [ev], expect=seen, lease=lease)
                answer = f"ok {head.high_water}"
            except AppendConflict as e:
                answer = f"conflict {e.actual}"
            except LeaseLost:
                answer = "lost"
        else:
            return
        print(answer, flush=True)


def race(store: PostgresStore, name: str, sessions: list[str], threads: int, n: int) -> None:
    """Append from several threads (so group commits carry several sessions) with retries."""
    conflicts = [0] * threads

    def work(t: int) -> None:
        for i in range(n):
            session = sessions[(t + i) % len(sessions)]
            ev = make(
                session=session,
                role="user",
                author="user",
                ts=i,
                content=Text(text=f"{name}-{t}-{i}"),
            )
            while True:
                try:
                    store.append(session, [ev], expect=store.head(session).high_water)
                    break
                except AppendConflict:
                    conflicts[t] += 1

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    print(json.dumps({"conflicts": sum(conflicts)}), flush=True)


def main(argv: list[str]) -> None:
    """Run one of the two modes against the store named by argv."""
    url, schema, name, mode, *rest = argv
    store = PostgresStore(url, schema=schema)
    try:
        if mode == "lockstep":
            lockstep(store, name, rest[0])
        else:
            race(store, name, rest[0].split(","), int(rest[1]), int(rest[2]))
    finally:
        store.close()


if __name__ == "__main__":
    main(sys.argv[1:])
