-- $1 timers due a second ago, each with a $2-byte payload of random bytes (so the WAL carries
-- every byte: a repeated character would compress to nothing), in one queue of one tenant over
-- 8 partitions, with key prefix $3. For `soak calibrate`; no promises recorded.
INSERT INTO queen.log_timers (tenant_id, queue, timer_key, partition, deliver_at, txn, message_id, payload, created_at, claimed_until)
SELECT 't0', 'q0', $3 || '-' || i, 'p' || (i % 8), now() - interval '1 second',
       $3 || '-' || i, gen_random_uuid(),
       substring(
           (SELECT decode(string_agg(replace(gen_random_uuid()::text, '-', ''), ''), 'hex')
            FROM generate_series(0, $2 / 16) AS b
            WHERE i >= 0)
           FROM 1 FOR $2),
       now(), now()
FROM generate_series(0, $1 - 1) AS i
