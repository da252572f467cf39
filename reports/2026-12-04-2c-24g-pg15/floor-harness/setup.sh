#!/bin/bash
# Scratch database for the floor harness: the schema, 200 000 due timers (512 B) over 3x4x8.
set -e
PSQL="psql -q -h 127.0.0.1 -p 54329 -U postgres"
DB=${1:-floor}
$PSQL -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" 2>&1 | grep -v NOTICE || true
for f in sql/0*.sql; do $PSQL -d $DB -v ON_ERROR_STOP=1 -f $f >/dev/null 2>&1 || { echo FAIL $f; exit 1; }; done
$PSQL -d $DB <<SQL
INSERT INTO queen.log_timers (tenant_id, queue, timer_key, partition, deliver_at, txn, message_id, payload, created_at)
SELECT 't' || (i % 3), 'q' || (i % 4), 'k-' || i, 'p' || (i % 8), now() - interval '1 second', 'k-' || i,
       gen_random_uuid(), convert_to(repeat('x', 512), 'UTF8'), now()
FROM generate_series(0, 199999) AS i;
SELECT count(*) FROM (SELECT queen.log_partition_ensure_v1('t' || t, 'q' || q, 'p' || p)
                      FROM generate_series(0,2) t, generate_series(0,3) q, generate_series(0,7) p) x;
VACUUM ANALYZE;
CHECKPOINT;
SQL
