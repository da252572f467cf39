-- Lateness of every fired timer, from database timestamps: (second of the run it fired in,
-- created_at - deliver_at in ms). $1: the run's start, epoch seconds.
SELECT floor(extract(epoch FROM m.created_at) - $1)::float8 AS second,
       (extract(epoch FROM m.created_at - e.deliver_at) * 1000)::float8 AS late_ms
FROM queen.log_messages m
JOIN soak_expected e USING (txn)
ORDER BY m.created_at
