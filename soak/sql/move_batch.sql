-- The physical limit of the bench: move up to $1 due timers into the log in one set-based
-- statement (no claim, no lease, no token check), the same payloads and the same partitions.
-- Returns the number moved. Partitions are provisioned by the bench before it starts.
-- Rows are found through the sweeper's own index, shard by shard, as cheaply as it can be done.
WITH picked AS (
    SELECT t.*
    FROM generate_series(0, 63) AS s(shard)
    CROSS JOIN LATERAL (
        SELECT x.ctid AS row_id, x.tenant_id, x.queue, x.partition, x.txn, x.message_id, x.payload, x.deliver_at
        FROM queen.log_timers x
        WHERE x.shard = s.shard AND x.visible_at <= now()
        LIMIT $1
        FOR UPDATE SKIP LOCKED
    ) AS t
    LIMIT $1
), routed AS (
    SELECT p.*, lp.id AS partition_id,
           row_number() OVER (PARTITION BY lp.id ORDER BY p.deliver_at, p.txn) AS n
    FROM picked p
    JOIN queen.queues q ON q.tenant_id = p.tenant_id AND q.name = p.queue
    JOIN queen.log_partitions lp ON lp.queue_id = q.id AND lp.name = p.partition
), counts AS (
    SELECT partition_id, count(*) AS moved FROM routed GROUP BY partition_id
), bumped AS (
    UPDATE queen.log_partitions lp
    SET last_offset = lp.last_offset + c.moved
    FROM counts c
    WHERE lp.id = c.partition_id
    RETURNING lp.id, lp.last_offset - c.moved AS base
), written AS (
    INSERT INTO queen.log_messages (partition_id, "offset", message_id, txn, payload, created_at)
    SELECT r.partition_id, b.base + r.n, r.message_id, r.txn, r.payload, clock_timestamp()
    FROM routed r JOIN bumped b ON b.id = r.partition_id
    RETURNING 1
), gone AS (
    -- By address: a TID scan, not a join against the whole table.
    DELETE FROM queen.log_timers t WHERE t.ctid = ANY (ARRAY(SELECT p.row_id FROM picked p)) RETURNING 1
)
SELECT (SELECT count(*) FROM written) + 0 * (SELECT count(*) FROM gone)
