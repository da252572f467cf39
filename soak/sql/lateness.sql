-- Lateness of every fired timer, from database timestamps: (second of the run it fired in,
-- created_at - deliver_at in ms). $1: the run's start, epoch seconds; $2: the end of the drain,
-- epoch seconds (infinity when it finished): a timer fired after it, by brokers shutting down,
-- was not delivered within the run's limit.
SELECT floor(extract(epoch FROM m.created_at) - $1)::float8 AS second,
       (extract(epoch FROM m.created_at - e.deliver_at) * 1000)::float8 AS late_ms
FROM queen.log_messages m
JOIN soak_expected e USING (txn)
WHERE m.created_at <= to_timestamp($2)
ORDER BY m.created_at
