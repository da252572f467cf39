# Interleaved timings of the limit's statement and the take (and variants), one session.
import sys
n = int(sys.argv[1]) if len(sys.argv) > 1 else 30
limit = open('soak/sql/move_batch.sql').read()
# strip comments, bind: $1 batch, $2 cursor, $3 partitions
body = "\n".join(l for l in limit.splitlines() if not l.strip().startswith('--'))
body = body.replace('$1', '200').replace('$2::tid', "'(0,0)'::tid").replace('$3::text[]', 'NULL::text[]')
take = "SELECT sum(timers) FROM queen.log_timers_take_v1(ARRAY(SELECT generate_series(0,63)), now(), 200, 200, 0, NULL, 8388608, 300);"
pick = "BEGIN; SELECT count(*) FROM queen.log_timers_pick_v1('x', ARRAY(SELECT generate_series(0,63)), now(), 200, 200, 0, NULL, 8388608, 300); ROLLBACK;"
lines = ["\\timing on", "\\pset pager off"]
for i in range(n):
    lines += ["\\echo LIMIT", body.strip().rstrip(';') + ";", "\\echo TAKE", take, "\\echo PICK", pick]
print("\n".join(lines))
