INSERT INTO queen.log_timers (tenant_id, queue, timer_key, partition, deliver_at, txn, message_id, payload, created_at)
SELECT 't0', 'q0', :'tag' || '-' || i, 'p' || (i % 8), now() - interval '1 minute', :'tag' || '-' || i, gen_random_uuid(), convert_to(repeat('x', 512), 'UTF8'), now()
FROM generate_series(1, :n) i;
ANALYZE queen.log_timers;
