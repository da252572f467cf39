-- Queen: delayed messages. A timer is a message that enters the log at or after deliver_at
-- (a floor, never an appointment), fired by whichever broker's sweeper claims it first.
--
-- Row states, all derived from claimed_until and claim_token against the caller's now:
--   waiting     deliver_at > now, no claim                 invisible to the claim, cancellable
--   due         visible_at <= now                          claimable
--   held        claim_token NOT NULL, claimed_until > now  in somebody's hands: not cancellable
--   backoff     claim_token NULL, claimed_until > now      invisible, cancellable
-- A held row whose lease ran out is due again (visible_at = claimed_until <= now) and a new claim
-- replaces its token, which is how the fire of the previous holder learns it lost the row.
--
-- No write makes a row visible earlier than the write's own now: a schedule or reschedule whose
-- delivery is already past, and a fire giving back a stale segment, set claimed_until to their
-- now (with no token: due, not held), so visible_at is never below it. The sweeper's head floors
-- rely on this (queen.log_timers_due_v1): a row written after a probe is never below the floor
-- that probe handed out, by more than how long a write can take.
CREATE TABLE IF NOT EXISTS queen.log_timers (
    tenant_id     text        NOT NULL,
    queue         text        NOT NULL,
    timer_key     text        NOT NULL,
    partition     text        NOT NULL,
    deliver_at    timestamptz NOT NULL,
    txn           text        NOT NULL,
    message_id    uuid        NOT NULL,
    payload       bytea       NOT NULL,
    attempts      integer     NOT NULL DEFAULT 0,
    last_error    text,
    claimed_until timestamptz,
    claim_token   uuid,
    created_at    timestamptz NOT NULL,
    -- 64 shards, fixed forever. Shards spread contention, they do not partition responsibility:
    -- every broker scans all 64; only its starting shard comes from its identity.
    shard         integer     GENERATED ALWAYS AS ((hashtextextended(timer_key, 0) & 63)::integer) STORED,
    -- The instant the row becomes claimable: the later of its delivery and its current lease or
    -- backoff. greatest() ignores NULL, so an unclaimed row is visible at deliver_at.
    visible_at    timestamptz GENERATED ALWAYS AS (greatest(deliver_at, claimed_until)) STORED,
    PRIMARY KEY (tenant_id, queue, timer_key),
    CONSTRAINT log_timers_names_not_empty CHECK (queue <> '' AND timer_key <> '' AND partition <> ''),
    CONSTRAINT log_timers_attempts_non_negative CHECK (attempts >= 0)
);

-- The one secondary index: the probe reads its first entry per shard (64 single-row seeks), the
-- claim walks it from the head of each shard. A claim rewrites visible_at, so every claim is a
-- non-HOT update of this index; a second index would double that cost.
CREATE INDEX IF NOT EXISTS log_timers_shard_visible_idx ON queen.log_timers (shard, visible_at);

-- [measured 2026-12-07] log_timers fillfactor = 100
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 2 brokers, 300 timers/s, 512 B payloads
--   commit:   084692f
--   symptom:  free space per page that claims cannot use: a claim rewrites visible_at, which is indexed, so it is never a HOT update
--   observed: 3 runs per value. (1) log_timers heap + index bytes at the end (safe within 1.25× of the least), median [min–max] per value: 100: 2457600 [2457600–2473984]; 90: 2940928 [2940928–2965504]; 70: 2482176 [2293760–3522560].
--   decision: 100, by the rule at the top of 001_log_schema.sql (shipped was 100): no edge is sought on side 1; the shipped value is safe on every side.
-- Why 100: every update of a timer row (claim, backoff, reschedule) rewrites visible_at, which is
-- indexed, so none can be a HOT update and free space left in a page buys nothing. (It was 90, a
-- guess; the first soak measured the table 19% larger at 90 than at 100 for no gain.)
-- vacuum_truncate = off: truncating the heap's tail takes an ACCESS EXCLUSIVE lock that would
-- stall every claim and fire; the table's peak size is kept instead.
ALTER TABLE queen.log_timers SET (fillfactor = 100, vacuum_truncate = off);

-- [measured 2026-12-07] log_timers autovacuum_vacuum_threshold = 2000
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 3 brokers, 500 timers/s, 512 B payloads
--   commit:   5826b07
--   symptom:  dead timer rows pile up between vacuums, and the probe and the pick walk them; against it: a vacuum run more often than the dead rows call for pays its fixed cost again: WAL and writes taken from the fire; against it: what the fire's users see of either; against it: the table's size, which the dead rows hold
--   observed: 3 runs per value. (1) dead rows in queen.log_timers, the most in any second (500 timers/s, 3 brokers, autovacuum_naptime 5 s) (safe within 2× of the least), median [min–max] per value: 500: 2368 [2366–2555]; 2000: 2284 [2273–3140]; 8000: 2304 [2288–2541]; 32000: 2329 [2326–2346]. Edge 32000, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the symptom did not appear at 32000, the sweep's end: the edge is there or beyond. (2) WAL bytes/s of the run (safe within 1.25× of the least), median [min–max] per value: 500: 893384 [892104–897835]; 2000: 892721 [891678–893203]; 8000: 893000 [892656–893272]; 32000: 892889 [892039–892900]. Edge 500, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the symptom did not appear at 500, the sweep's end: the edge is there or beyond. (3) lateness p99 (ms) of the timers (safe within 2× of the least), median [min–max] per value: 500: 9.1 [8.7–9.3]; 2000: 8.7 [8.6–8.7]; 8000: 9.7 [9.1–10.2]; 32000: 8.4 [7.8–10.4]. (4) queen.log_timers heap + index bytes at the end (recorded, not judged), median [min–max] per value: 500: 2449408 [2375680–2449408]; 2000: 2433024 [2400256–2736128]; 8000: 2392064 [2383872–2400256]; 32000: 2375680 [2367488–2408448].
--   decision: 2000, by the rule at the top of 001_log_schema.sql (shipped was 2000): the edge 32000 is not resolved: one step beyond it; the value in force lies beyond it and is safe on every side.
-- The sweep above cannot show its symptom in 60 s: pages pruned as they are read keep the dead
-- rows near 2 300 at every threshold that long. It takes minutes: with the server's defaults,
-- 39 318 dead rows in 300 s (reports/faults/2026-12-06-2c-24g-pg15/autovacuum/steady/, at
-- 69e3ed8); at 2 000 with the launcher every 5 s, at most 3 762 over an hour and the table
-- 464 KiB -> 3 136 KiB (.../autovacuum/steady-tuned-hour/, binaries built at dd10799, 1 run).
-- Autovacuum of the timers: every fired timer leaves one dead row (and its index entries) that
-- the probe and the claim walk until a vacuum removes it. The server's defaults (a vacuum once a
-- fifth of the table is dead, throttled) let the dead rows of minutes pile up at the head of the
-- index; these vacuum once 2 000 rows are dead (4 s of fires at 500 timers/s), whatever the
-- table's size, at full speed. A vacuum of a big table stays cheap: PostgreSQL skips the index
-- pass when under 2% of the heap's pages hold dead rows, and all-visible pages are not read.
-- How often the launcher looks (autovacuum_naptime, 60 s by default) is the server's setting, not
-- a table's: the soak sets it to 5 s, and operators should too (README, "Autovacuum").
ALTER TABLE queen.log_timers SET (autovacuum_vacuum_scale_factor = 0,
                                  autovacuum_vacuum_threshold = 2000,
                                  autovacuum_vacuum_cost_delay = 0);

-- Dead letters: timers that exhausted their attempts, archived with their payload intact.
CREATE TABLE IF NOT EXISTS queen.log_dlq (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id   text        NOT NULL,
    queue       text        NOT NULL,
    timer_key   text        NOT NULL,
    partition   text        NOT NULL,
    deliver_at  timestamptz NOT NULL,
    txn         text        NOT NULL,
    message_id  uuid        NOT NULL,
    payload     bytea       NOT NULL,
    attempts    integer     NOT NULL,
    last_error  text,
    dead_at     timestamptz NOT NULL
);
