"""The PostgreSQL schema and its migrations: SQLite's log, with the rules enforced by the server.

The statements run with `search_path` set to the store's schema, so names are unqualified; the
trigger functions that read tables pin that path (`SET search_path FROM CURRENT`) so they behave
the same when a foreign connection with another path writes to the tables. Never edit a released
step: add a new one.
"""

from __future__ import annotations

from psycopg import sql

from bubu.errors import NewerLogError
from bubu.log.migrations import Migration
from bubu.log.postgres._connect import Connection

GENESIS_SQL = "decode(repeat('00', 32), 'hex')"
"""The chain hash before a session's first event, as a SQL expression."""

NOW_MS_SQL = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
"""The database clock in Unix milliseconds, as a SQL expression (leases are timed by it)."""

REQUIRED_TRIGGERS: tuple[tuple[str, str], ...] = (
    ("events", "events_chain"),
    ("events", "events_immutable"),
    ("events", "events_approval"),
    ("blobs", "blobs_immutable"),
    ("approvals", "approvals_immutable"),
    ("objects", "objects_immutable"),
    ("sessions", "sessions_guard"),
)
"""(table, trigger) pairs that must exist and be enabled for the log's rules to hold."""


def _immutable(table: str) -> tuple[str, ...]:
    # Statement-level, so even an UPDATE or DELETE that matches no row is refused.
    return (
        f"CREATE TRIGGER {table}_immutable BEFORE UPDATE OR DELETE OR TRUNCATE ON {table} "
        "FOR EACH STATEMENT EXECUTE FUNCTION refuse_change()",
    )


_REFUSE_CHANGE = """
CREATE FUNCTION refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'bubu: % are append-only (% refused)', TG_TABLE_NAME, TG_OP
    USING ERRCODE = 'integrity_constraint_violation';
END $$
"""

# One pass over the inserted rows per statement: each session's rows must continue its head
# (gapless seq from high_water + 1, each hash = sha256(previous hash || payload)), and the head
# row moves with them. The head row is locked, so concurrent writers to one session serialise.
_EVENTS_CHAIN = """
CREATE FUNCTION events_chain() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
  r record;
  cur bigint := NULL;
  hw bigint;
  h bytea;
BEGIN
  FOR r IN SELECT sid, seq, payload, hash FROM new_rows ORDER BY sid, seq LOOP
    IF cur IS DISTINCT FROM r.sid THEN
      IF cur IS NOT NULL THEN
        UPDATE sessions SET high_water = hw, head = h WHERE sid = cur;
      END IF;
      SELECT s.high_water, s.head INTO hw, h FROM sessions s WHERE s.sid = r.sid FOR NO KEY UPDATE;
      cur := r.sid;
    END IF;
    IF r.seq <> hw + 1 THEN
      RAISE EXCEPTION 'bubu: seq must be gapless (expected %, got %)', hw + 1, r.seq
        USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    h := sha256(h || r.payload);
    IF h <> r.hash THEN
      RAISE EXCEPTION 'bubu: the hash at seq % does not chain from the one before', r.seq
        USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    hw := r.seq;
  END LOOP;
  IF cur IS NOT NULL THEN
    UPDATE sessions SET high_water = hw, head = h WHERE sid = cur;
  END IF;
  RETURN NULL;
END $$
"""

# A session's identity and head change only through events_chain (trigger depth 2).
_SESSIONS_GUARD = f"""
CREATE FUNCTION sessions_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    IF NEW.high_water <> 0 OR NEW.head <> {GENESIS_SQL} THEN
      RAISE EXCEPTION 'bubu: a new session starts with an empty log'
        USING ERRCODE = 'integrity_constraint_violation';
    END IF;
  ELSIF pg_trigger_depth() < 2 AND (NEW.sid, NEW.id, NEW.high_water, NEW.head)
        IS DISTINCT FROM (OLD.sid, OLD.id, OLD.high_water, OLD.head) THEN
    RAISE EXCEPTION 'bubu: a session''s id and head change only by appending events'
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END $$
"""

# The fleet's work queue (DESIGN §7), derived from the log in the same transaction as every
# append: a user request outside a turn queues the session, a turn start opens it, a turn end idles
# it, a blocked recovery notice blocks it (and a new run reopens it, as `fold_status` does). Only
# the few boundary kinds are looked at, and only `text` and `recovery_notice` rows are parsed.
_WORK_STEP = r"""
CREATE FUNCTION work_step(p_sid bigint, p_seq bigint, p_kind text, p_payload bytea) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  ev json;
  cur text;
  nxt text;
BEGIN
  SELECT state INTO cur FROM work WHERE sid = p_sid;
  IF p_kind IN ('text', 'recovery_notice') THEN
    BEGIN
      -- json (not jsonb) and no NUL escapes: only the fields read below are ever unescaped.
      ev := replace(convert_from(p_payload, 'UTF8'), '\u0000', '\u0020')::json;
    EXCEPTION WHEN others THEN
      RETURN;  -- a derived index never blocks an append
    END;
  END IF;
  IF p_kind = 'text' THEN
    IF ev->>'role' IS DISTINCT FROM 'user' OR ev->>'visibility' IS NOT DISTINCT FROM 'hidden'
       OR cur IN ('open', 'blocked') THEN
      RETURN;
    END IF;
    nxt := 'queued';
  ELSIF p_kind = 'turn_started' THEN
    nxt := 'open';
  ELSIF p_kind = 'turn_ended' THEN
    nxt := 'idle';
  ELSIF p_kind = 'run_started' THEN
    IF cur IS DISTINCT FROM 'blocked' THEN
      RETURN;
    END IF;
    nxt := 'open';
  ELSIF p_kind = 'recovery_notice' THEN
    IF ev#>>'{content,note,status}' IS DISTINCT FROM 'blocked' THEN
      RETURN;
    END IF;
    nxt := 'blocked';
  ELSE
    RETURN;
  END IF;
  INSERT INTO work(sid, state, since_seq, since_ms) VALUES (p_sid, nxt, p_seq, NOW_MS)
  ON CONFLICT (sid) DO UPDATE SET state = excluded.state, since_seq = excluded.since_seq,
    since_ms = excluded.since_ms, not_before = 0, tries = 0;
END $$
""".replace("NOW_MS", NOW_MS_SQL)

RETRY_LATER_MS = 600_000
"""How long after a turn gave up waiting for its provider a worker tries it again."""

# Migration 4: a turn that ended because its provider stayed unavailable is `retry`, claimable
# again after RETRY_LATER_MS (the turn already waited out its own retry horizon).
_WORK_STEP_RETRY = (
    _WORK_STEP.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")
    .replace(
        "IN ('text', 'recovery_notice') THEN", "IN ('text', 'recovery_notice', 'turn_ended') THEN"
    )
    .replace("  nxt text;\n", "  nxt text;\n  nb bigint := 0;\n")
    .replace(
        "  ELSIF p_kind = 'turn_ended' THEN\n    nxt := 'idle';\n",
        "  ELSIF p_kind = 'turn_ended' THEN\n    nxt := 'idle';\n"
        "    IF ev#>>'{content,note,cause}' = 'provider_unavailable' THEN\n"
        f"      nxt := 'retry';\n      nb := {NOW_MS_SQL} + {RETRY_LATER_MS};\n    END IF;\n",
    )
    .replace(
        "INSERT INTO work(sid, state, since_seq, since_ms) VALUES (p_sid, nxt, p_seq, "
        + NOW_MS_SQL
        + ")",
        "INSERT INTO work(sid, state, since_seq, since_ms, not_before) VALUES (p_sid, nxt, p_seq, "
        + NOW_MS_SQL
        + ", nb)",
    )
    .replace(
        "since_ms = excluded.since_ms, not_before = 0,",
        "since_ms = excluded.since_ms, not_before = excluded.not_before,",
    )
)

_WORK_KINDS = "('text', 'turn_started', 'turn_ended', 'run_started', 'recovery_notice')"

_EVENTS_WORK = f"""
CREATE FUNCTION events_work() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT sid, seq, kind, payload FROM new_rows WHERE kind IN {_WORK_KINDS}
           ORDER BY sid, seq LOOP
    PERFORM work_step(r.sid, r.seq, r.kind, r.payload);
  END LOOP;
  RETURN NULL;
END $$
"""

# Sessions logged before the queue existed get their state from their whole log.
_WORK_BACKFILL = f"""
DO $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT sid, seq, kind, payload FROM events WHERE kind IN {_WORK_KINDS}
           ORDER BY sid, seq LOOP
    PERFORM work_step(r.sid, r.seq, r.kind, r.payload);
  END LOOP;
END $$
"""

# Migration 5: a worker holds a queued task that asks for more than its ceiling (`task_held`)
# until a person approves it (`task_approved`); a held session is not claimable.
_WORK_STEP_HELD = _WORK_STEP_RETRY.replace(
    "OR cur IN ('open', 'blocked') THEN", "OR cur IN ('open', 'blocked', 'held') THEN"
).replace(
    "  ELSE\n    RETURN;\n  END IF;\n  INSERT",
    "  ELSIF p_kind = 'task_held' THEN\n    nxt := 'held';\n"
    "  ELSIF p_kind = 'task_approved' THEN\n    IF cur IS DISTINCT FROM 'held' THEN\n"
    "      RETURN;\n    END IF;\n    nxt := 'queued';\n"
    "  ELSE\n    RETURN;\n  END IF;\n  INSERT",
)

_WORK_KINDS_HELD = _WORK_KINDS.replace(")", ", 'task_held', 'task_approved')")

# A trigger function finds tables through its pinned path; a temporary table (pg_temp is searched
# first unless named) must never stand in for `sessions` and feed the chain check a forged head.
_PIN_PATHS = """
DO $$
DECLARE
  f text;
BEGIN
  FOREACH f IN ARRAY ARRAY['events_chain()', 'work_step(bigint, bigint, text, bytea)',
                           'events_work()', 'sessions_guard()', 'refuse_change()'] LOOP
    EXECUTE format('ALTER FUNCTION %I.%s SET search_path = %I, pg_catalog, pg_temp',
                   current_schema(), f, current_schema());
  END LOOP;
END $$
"""


# Migration 6: an approval of a held task (`bubu approve-task`) counts only where the database
# vouches for it. Appending a `task_approved` event inserts a row into `approvals` as the
# appending role, so a role without INSERT there (a worker, a submitter) cannot append one; an
# event that hides its kind gets no row, and workers ignore an approval without one.
_EVENTS_APPROVAL = """
CREATE FUNCTION events_approval() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  -- Only when there is one: the privilege is checked even for an INSERT of no rows.
  IF EXISTS (SELECT 1 FROM new_rows WHERE kind = 'task_approved') THEN
    INSERT INTO approvals(sid, seq)
      SELECT sid, seq FROM new_rows WHERE kind = 'task_approved';
  END IF;
  RETURN NULL;
END $$
"""

_PIN_APPROVAL = _PIN_PATHS.replace(
    """ARRAY['events_chain()', 'work_step(bigint, bigint, text, bytea)',
                           'events_work()', 'sessions_guard()', 'refuse_change()']""",
    "ARRAY['events_approval()']",
)


PG_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "log, sessions, blobs, leases, views",
        (
            "CREATE TABLE sessions(sid bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
            'id text COLLATE "C" NOT NULL UNIQUE, title text NOT NULL, workspace text NOT NULL, '
            "model text, created_ms bigint NOT NULL, last_ms bigint, "
            "high_water bigint NOT NULL DEFAULT 0 CHECK (high_water >= 0), "
            f"head bytea NOT NULL DEFAULT {GENESIS_SQL} CHECK (length(head) = 32))",
            "CREATE INDEX sessions_created ON sessions(created_ms DESC, sid DESC)",
            "CREATE TABLE events(sid bigint NOT NULL REFERENCES sessions(sid), "
            "seq bigint NOT NULL CHECK (seq > 0), kind text NOT NULL, payload bytea NOT NULL, "
            "hash bytea NOT NULL CHECK (length(hash) = 32), PRIMARY KEY (sid, seq))",
            "CREATE INDEX events_kind ON events(sid, kind, seq)",
            _REFUSE_CHANGE,
            _EVENTS_CHAIN,
            "CREATE TRIGGER events_chain AFTER INSERT ON events REFERENCING NEW TABLE AS new_rows "
            "FOR EACH STATEMENT EXECUTE FUNCTION events_chain()",
            *_immutable("events"),
            _SESSIONS_GUARD,
            "CREATE TRIGGER sessions_guard BEFORE INSERT OR UPDATE ON sessions "
            "FOR EACH ROW EXECUTE FUNCTION sessions_guard()",
            "CREATE TABLE blobs(sha256 text PRIMARY KEY, size bigint NOT NULL, "
            "data bytea NOT NULL, "
            "CHECK (sha256 = encode(sha256(data), 'hex')), CHECK (size = length(data)))",
            *_immutable("blobs"),
            "CREATE TABLE leases(sid bigint PRIMARY KEY REFERENCES sessions(sid), "
            "owner text NOT NULL, epoch bigint NOT NULL, expires_ms bigint NOT NULL)",
            "CREATE TABLE views(kind text NOT NULL, session text NOT NULL, key text NOT NULL, "
            "source_hw bigint NOT NULL, source_digest text NOT NULL, data bytea NOT NULL, "
            "created_ms bigint NOT NULL, PRIMARY KEY (kind, session, key))",
        ),
    ),
    Migration(
        2,
        "the fleet's work queue",
        (
            "CREATE TABLE work(sid bigint PRIMARY KEY REFERENCES sessions(sid), "
            "state text NOT NULL CHECK (state IN ('queued', 'open', 'blocked', 'idle')), "
            "since_seq bigint NOT NULL, since_ms bigint NOT NULL, "
            "not_before bigint NOT NULL DEFAULT 0, tries integer NOT NULL DEFAULT 0)",
            "CREATE INDEX work_ready ON work(since_ms, sid) WHERE state IN ('queued', 'open')",
            _WORK_STEP,
            _EVENTS_WORK,
            # Named after events_chain, so it fires after it (and after its head-row lock).
            "CREATE TRIGGER events_work AFTER INSERT ON events REFERENCING NEW TABLE AS new_rows "
            "FOR EACH STATEMENT EXECUTE FUNCTION events_work()",
            _WORK_BACKFILL,
        ),
    ),
    Migration(
        3,
        "stop requests on leases",
        ("ALTER TABLE leases ADD COLUMN stop_requested boolean NOT NULL DEFAULT false",),
    ),
    Migration(
        4,
        "turns that gave up on their provider are retried later",
        (
            "ALTER TABLE work DROP CONSTRAINT work_state_check",
            "ALTER TABLE work ADD CONSTRAINT work_state_check "
            "CHECK (state IN ('queued', 'open', 'blocked', 'idle', 'retry'))",
            "DROP INDEX work_ready",
            "CREATE INDEX work_ready ON work(since_ms, sid) "
            "WHERE state IN ('queued', 'open', 'retry')",
            _WORK_STEP_RETRY,
        ),
    ),
    Migration(
        5,
        "held tasks, and trigger functions that never look in pg_temp first",
        (
            "ALTER TABLE work DROP CONSTRAINT work_state_check",
            "ALTER TABLE work ADD CONSTRAINT work_state_check "
            "CHECK (state IN ('queued', 'open', 'blocked', 'idle', 'retry', 'held'))",
            _WORK_STEP_HELD.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"),
            _EVENTS_WORK.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION").replace(
                _WORK_KINDS, _WORK_KINDS_HELD
            ),
            _PIN_PATHS,
        ),
    ),
    Migration(
        6,
        "approvals of held tasks, vouched for by the role that appended them",
        (
            "CREATE TABLE approvals(sid bigint NOT NULL REFERENCES sessions(sid), "
            "seq bigint NOT NULL, approver name NOT NULL DEFAULT current_user, "
            f"approved_ms bigint NOT NULL DEFAULT {NOW_MS_SQL}, PRIMARY KEY (sid, seq))",
            *_immutable("approvals"),
            _EVENTS_APPROVAL,
            _PIN_APPROVAL,
            "CREATE TRIGGER events_approval AFTER INSERT ON events "
            "REFERENCING NEW TABLE AS new_rows "
            "FOR EACH STATEMENT EXECUTE FUNCTION events_approval()",
        ),
    ),
    Migration(
        7,
        "workspace snapshot objects",
        (
            "CREATE TABLE objects(sha256 text PRIMARY KEY, size bigint NOT NULL CHECK (size >= 0), "
            "data bytea NOT NULL)",
            *_immutable("objects"),
        ),
    ),
    Migration(
        8,
        "workspace objects stored as deltas",
        # No schema change: an object may now be a delta against an earlier version
        # (`bubu.log.objects`); recorded so that an older Bubu refuses the schema.
        (),
    ),
)


def _up_to_date(db: Connection, schema: str) -> bool:
    """Whether `schema` records exactly the migrations this Bubu knows (a read, no DDL)."""
    with db.transaction():
        table = db.execute(
            "SELECT to_regclass(format('%%I.bubu_migrations', %s::text))", [schema]
        ).fetchone()
        if table is None or table[0] is None:
            return False
        done = {int(r[0]) for r in db.execute("SELECT version FROM bubu_migrations")}
    return {m.version for m in PG_MIGRATIONS} == done


def migrate(db: Connection, schema: str, where: str) -> None:
    """Create `schema` if needed and apply the missing migrations, all in one transaction.

    Raises NewerLogError when the schema records a migration this Bubu does not know.
    """
    if _up_to_date(db, schema):
        # A least-privilege role (`bubu fleet roles`) may create nothing: it never has to.
        return
    with db.transaction():
        # Two processes opening a fresh schema at once must not both create it.
        db.execute("SELECT pg_advisory_xact_lock(hashtext('bubu.migrate.' || %s))", [schema])
        db.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        db.execute(
            "CREATE TABLE IF NOT EXISTS bubu_migrations(version integer PRIMARY KEY, "
            f"name text NOT NULL, applied_ms bigint NOT NULL DEFAULT {NOW_MS_SQL})"
        )
        done = {int(r[0]) for r in db.execute("SELECT version FROM bubu_migrations")}
        known = {m.version for m in PG_MIGRATIONS}
        newer = sorted(done - known)
        if newer:
            raise NewerLogError(
                f"the schema {schema} at {where} was written by a newer Bubu (migration "
                f"{newer[-1]}, this Bubu knows up to {max(known)}); upgrade Bubu to open it"
            )
        for m in PG_MIGRATIONS:
            if m.version not in done:
                for stmt in m.statements:
                    db.execute(stmt)
                db.execute(
                    "INSERT INTO bubu_migrations(version, name) VALUES (%s, %s)",
                    [m.version, m.name],
                )


def integrity_problems(db: Connection, schema: str) -> list[str]:
    """What is wrong with the schema's enforcement: missing or disabled triggers, head rows that
    disagree with their events. Empty when all is well."""
    found = {
        (str(t), str(n)): str(enabled)
        for t, n, enabled in db.execute(
            "SELECT c.relname, t.tgname, t.tgenabled FROM pg_trigger t "
            "JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace ns ON ns.oid = c.relnamespace "
            "WHERE ns.nspname = %s AND NOT t.tgisinternal",
            [schema],
        )
    }
    problems = []
    for table, name in REQUIRED_TRIGGERS:
        state = found.get((table, name))
        if state is None:
            problems.append(f"the trigger {name} on {table} is missing")
        elif state == "D":
            problems.append(f"the trigger {name} on {table} is disabled")
    bad = db.execute(
        "SELECT s.id FROM sessions s LEFT JOIN (SELECT sid, max(seq) AS m, count(*) AS c "
        "FROM events GROUP BY sid) e ON e.sid = s.sid "
        "WHERE s.high_water <> coalesce(e.m, 0) OR s.high_water <> coalesce(e.c, 0) "
        "ORDER BY s.sid LIMIT 5"
    ).fetchall()
    if bad:
        ids = ", ".join(str(r[0]) for r in bad)
        problems.append(f"the head rows of {ids} disagree with their events")
    return problems
