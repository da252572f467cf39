-- $1 timers for the soak, due $2 ms from now (negative: already due), each with a $3-byte
-- payload, spread over $4 tenants, $5 queues and $6 partitions, with txn prefix $7; their
-- promised instants go to soak_expected. The payload is one repeated character, which TOAST
-- compresses to almost nothing, or with $8 SHA-256 bytes of the timer's name, which nothing
-- compresses: the WAL then carries every byte, as a real encrypted or compressed payload makes
-- it do.
WITH made AS (
    INSERT INTO queen.log_timers (tenant_id, queue, timer_key, partition, deliver_at, txn, message_id, payload, created_at, claimed_until)
    SELECT 't' || (i % $4), 'q' || (i % $5), $7 || '-' || i, 'p' || (i % $6),
           now() + make_interval(secs => $2 / 1000.0),
           $7 || '-' || i, gen_random_uuid(), CASE WHEN $8
                THEN substring((SELECT string_agg(sha256(convert_to($7 || i || '-' || j, 'UTF8')), ''::bytea ORDER BY j)
                                FROM generate_series(0, ($3 - 1) / 32) AS j) FROM 1 FOR $3)
                ELSE convert_to(repeat('x', $3), 'UTF8') END, now(),
           CASE WHEN $2 < 0 THEN now() END
    FROM generate_series(0, $1 - 1) AS i
    RETURNING txn, deliver_at
)
INSERT INTO soak_expected (txn, deliver_at) SELECT txn, deliver_at FROM made
