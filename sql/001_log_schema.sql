-- Queen: the message log (queues, partitions with their offset allocator, messages).
--
-- HOW A SETTING EARNS ITS NUMBER (the dated-block convention)
--
-- Every number in this directory, and every default of the sweeper's QUEEN_* knobs, is either
-- measured or says plainly that it is not. A measured setting carries a dated block:
--
--   -- [measured 2026-12-02] QUEEN_SWEEPER_LEASE_MS = 30000
--   --   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (shared_buffers=128MB,
--   --             synchronous_commit=on, max_connections=100), 3 brokers, 400 timers/s
--   --   symptom:  under 8 pushers on 4 partitions, leases below 4000 ms come back stale
--   --   observed: 0 stale segments at 30000 ms; 112 stale segments/min at 3000 ms
--
-- that is: the setting and its value, the date it was measured, the rig it was measured on (cores,
-- memory, PostgreSQL version and the settings that matter, broker count, load), the symptom the
-- setting guards against, and the number observed. A number from a live stack is never a
-- measurement; only a soak on a test rig is (`soak experiments`, which writes
-- reports/<date>-<rig>/blocks.sql, and `soak apply-blocks <dir>`, which replaces the markers).
--
-- A setting that has not been measured yet carries exactly one marker line, which the soak
-- replaces with its block:
--
--   -- [not measured] NAME = VALUE: why this value was guessed
--
-- The knobs of the sweeper process live in the Rust binary (sweeper/src/config.rs), but their
-- numbers are recorded here, in one place, so an operator reads every guess of the system at once.
--
-- SWEEPER KNOBS
-- [not measured] QUEEN_SWEEPER_LEASE_MS = 30000: long enough that a fire contending with pushes commits inside half of it.
-- [not measured] QUEEN_SWEEPER_CLAIM_BATCH = 200: rows per claim; small enough that one claim is a short transaction.
-- [not measured] QUEEN_SWEEPER_CYCLE_MAX_ROWS = 5000: rows per pass before the probe runs again.
-- [not measured] QUEEN_SWEEPER_MAX_FIRE_BYTES = 8388608: WAL bytes per fire transaction before it splits.
-- [not measured] QUEEN_SWEEPER_MAX_SLEEP_MS = 1000: the worst-case delay for a timer scheduled on another broker.
-- [not measured] QUEEN_SWEEPER_MIN_SLEEP_MS = 5: the floor when work is genuinely available.
-- [not measured] QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS = 25: lower end of the jittered band after an empty claim.
-- [not measured] QUEEN_SWEEPER_EMPTY_CLAIM_MAX_MS = 200: upper end of the jittered band after an empty claim.
-- [not measured] QUEEN_KV_EXPIRE_EVERY_MS = 1000: prune cadence; a prune is invisible to readers.
-- [not measured] QUEEN_KV_EXPIRE_BATCH = 1000: rows deleted per prune call.
-- [not measured] QUEEN_KV_USAGE_EVERY_MS = 300000: usage rollup cadence; precision, not delivery.
-- [not measured] QUEEN_SWEEPER_DUE_CAP = 2000: the probe stops counting due rows here; bounds its cost.
-- [not measured] QUEEN_SWEEPER_STATEMENT_TIMEOUT_MS = 5000: every call is cancelled server-side after this.
-- [not measured] QUEEN_SWEEPER_MAX_ATTEMPTS = 5: failed fires before a timer goes to the DLQ.
--
-- API LIMITS (queen-sweeper serve; sweeper/src/api/limits.rs)
-- [not measured] QUEEN_TIMERS_MAX_PAYLOAD_BYTES = 262144: one timer's payload; SQS's familiar bound, far under one 8 MiB fire.
-- [not measured] QUEEN_TIMERS_MAX_OPS_PER_CALL = 1000: operations sharing one schedule transaction.
-- [not measured] QUEEN_TIMERS_MAX_HORIZON_S = 31536000: a year ahead; further is more likely a unit mistake than a plan.
-- [not measured] QUEEN_API_MAX_BODY_BYTES = 4194304: one request body; room for twelve base64-encoded payloads at their limit.
-- [not measured] QUEEN_API_MAX_KEY_BYTES = 512: a name; three of them fit a B-tree entry with room to spare.
-- [not measured] QUEEN_API_MAX_IN_FLIGHT = 64: requests served at once before a 503; eight per API connection.
-- [not measured] QUEEN_API_POOL_SIZE = 8: the API's connections, apart from the sweeper's pool.
-- [not measured] QUEEN_API_REQUEST_TIMEOUT_MS = 15000: a request's deadline; above two statement timeouts plus grace.
--
-- Files in sql/ are applied in lexical order, every time a broker boots, in one transaction, so
-- everything here is idempotent: IF NOT EXISTS for objects, CREATE OR REPLACE for functions, and
-- ALTER ... SET for storage options so that a changed number reaches an existing table.

CREATE SCHEMA IF NOT EXISTS queen;

-- A queue belongs to one tenant; the same name under two tenants is two queues.
CREATE TABLE IF NOT EXISTS queen.queues (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id   text        NOT NULL,
    name        text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queues_tenant_name_key UNIQUE (tenant_id, name),
    CONSTRAINT queues_name_not_empty CHECK (name <> '' AND tenant_id <> '')
);

-- The partition row is the per-partition push serializer: every append locks it, takes
-- last_offset + 1 .. last_offset + n, and writes the new last_offset back. Offsets of a partition
-- are therefore 0..N-1, dense, each exactly once, whatever mix of pushes and fires produced them.
CREATE TABLE IF NOT EXISTS queen.log_partitions (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_id    bigint      NOT NULL REFERENCES queen.queues (id),
    name        text        NOT NULL,
    last_offset bigint      NOT NULL DEFAULT -1,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT log_partitions_queue_name_key UNIQUE (queue_id, name),
    CONSTRAINT log_partitions_name_not_empty CHECK (name <> '')
);

-- The log. created_at is the later of the writer's logical now (p_now) and the instant the row was
-- written, so fire lateness measured as created_at - deliver_at includes the time a fire spent
-- waiting for partition locks, and is never negative when a test time-travels p_now forward.
CREATE TABLE IF NOT EXISTS queen.log_messages (
    partition_id bigint      NOT NULL REFERENCES queen.log_partitions (id),
    "offset"     bigint      NOT NULL,
    message_id   uuid        NOT NULL,
    txn          text        NOT NULL,
    payload      bytea       NOT NULL,
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (partition_id, "offset")
);
