-- $1 timers for the soak, due $2 ms from now (negative: already due), each with a $3-byte
-- payload, spread over $4 tenants, $5 queues and $6 partitions, with txn prefix $7; their
-- promised instants go to soak_expected.
WITH made AS (
    INSERT INTO queen.log_timers (tenant_id, queue, timer_key, partition, deliver_at, txn, message_id, payload, created_at, claimed_until)
    SELECT 't' || (i % $4), 'q' || (i % $5), $7 || '-' || i, 'p' || (i % $6),
           now() + make_interval(secs => $2 / 1000.0),
           $7 || '-' || i, gen_random_uuid(), convert_to(repeat('x', $3), 'UTF8'), now(),
           CASE WHEN $2 < 0 THEN now() END
    FROM generate_series(0, $1 - 1) AS i
    RETURNING txn, deliver_at
)
INSERT INTO soak_expected (txn, deliver_at) SELECT txn, deliver_at FROM made
