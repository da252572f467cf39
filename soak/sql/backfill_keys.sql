-- The idempotency key table as a full window of keyed schedule calls leaves it: $1 keys created
-- evenly over the $2 seconds before $7 (the oldest expire as the run starts, as they would), spread
-- over $3 tenants, each holding the answer of a call of $4 scheduled timers in the API's shape
-- (sweeper/src/types.rs, ApplyResult), so a row weighs what a real key's row weighs. One slice
-- of keys per statement: numbers $5 up to $5 + $6 (and below $1).
INSERT INTO queen.api_idempotency (tenant, key, request, answer, created_at)
SELECT 't' || (i % $3),
       'backfill-' || i,
       sha256(convert_to('backfill-' || i, 'UTF8')),
       (SELECT jsonb_agg(jsonb_build_object(
                   'index', j,
                   'queue', 'q' || ((i + j) % 4),
                   'timerKey', 'backfill-' || i || '-' || j,
                   'status', 'scheduled',
                   'messageId', gen_random_uuid(),
                   'deliverInMs', 1000 + j,
                   'deliverAt', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')))
        FROM generate_series(0, $4 - 1) AS j),
       $7::timestamptz - make_interval(secs => $2::float8) + make_interval(secs => i * $2::float8 / $1)
FROM generate_series($5, least($5 + $6, $1) - 1) AS i
