-- The physical limit of the bench: move up to $1 due timers into the log in one set-based
-- statement (no claim, no lease, no token check), the same payloads and the same partitions.
-- Returns the number moved and the last address it took. Partitions are provisioned by the
-- bench before it starts. $3: the partitions this connection moves (NULL: every one); the limit
-- on N connections gives each a disjoint set, so no two of them wait on one partition's row.
-- Rows are taken in physical order from a cursor ($2, the last address moved; '(0,0)' to start):
-- a TID range scan reads each row once, where an index scan from the head of each shard would
-- walk every dead entry of the batches before it (measured: 10 ms per batch at the start, 160 ms
-- after 800 batches).
WITH picked AS (
    SELECT t.ctid AS row_id, t.tenant_id, t.queue, t.partition, t.txn, t.message_id, t.payload, t.deliver_at
    FROM queen.log_timers t
    WHERE t.ctid > $2::tid AND t.visible_at <= now()
      AND ($3::text[] IS NULL OR t.partition = ANY ($3::text[]))
    -- No ORDER BY: a TID range scan already returns rows in address order, and the planner
    -- would otherwise sort the whole rest of the table to prove it.
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), routed AS (
    SELECT p.*, lp.id AS partition_id,
           row_number() OVER (PARTITION BY lp.id ORDER BY p.deliver_at, p.txn) AS n
    FROM picked p
    JOIN queen.queues q ON q.tenant_id = p.tenant_id AND q.name = p.queue
    JOIN queen.log_partitions lp ON lp.queue_id = q.id AND lp.name = p.partition
), locked AS (
    -- The product's allocation (queen.log_last_offset_v1 under the partition's row lock). One
    -- statement is enough here: each connection moves its own partitions, so no lock is waited
    -- for and the statement's snapshot already holds every message of its partitions.
    SELECT lp.id FROM queen.log_partitions lp
    WHERE lp.id IN (SELECT DISTINCT partition_id FROM routed)
    FOR UPDATE
), based AS (
    SELECT l.id, queen.log_last_offset_v1(l.id) AS base FROM locked l
), written AS (
    INSERT INTO queen.log_messages (partition_id, "offset", message_id, txn, payload, created_at)
    SELECT r.partition_id, b.base + r.n, r.message_id, r.txn, r.payload, clock_timestamp()
    FROM routed r JOIN based b ON b.id = r.partition_id
    RETURNING 1
), gone AS (
    -- By address: a TID scan, not a join against the whole table.
    DELETE FROM queen.log_timers t WHERE t.ctid = ANY (ARRAY(SELECT p.row_id FROM picked p)) RETURNING 1
)
SELECT (SELECT count(*) FROM written) + 0 * (SELECT count(*) FROM gone),
       (SELECT max(row_id)::text FROM picked)
