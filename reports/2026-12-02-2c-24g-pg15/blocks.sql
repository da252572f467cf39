-- Dated blocks from `soak experiments`, written on 2026-12-03 by rig 2c-24g-pg15; each block names the
-- day and the rig it was measured on (a run with --only keeps the other settings' blocks).
-- Apply them with `soak apply-blocks <this directory>`.

-- [measured 2026-12-02] QUEEN_KV_USAGE_EVERY_MS = 300000
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 1 000 tenants, KV rows as listed, a fifth as many pending timers
--   symptom:  the rollup's cost tracks the tables' size: run too often, it takes a connection's time from the fire
--   observed: one full rollup (1 000 tenants) took 10000 rows: 34.9 ms; 100000 rows: 118 ms; 400000 rows: 389 ms; at 1% of one connection the cadence must be at least 38900 ms for the largest. Edge of the symptom: 38900. the shipped value is on the safe side.

-- [measured 2026-12-02] QUEEN_SWEEPER_LEASE_MS = 30000
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 3 brokers, a backlog of 20000 timers, 4096 B payloads, 4 pushers × 100/s × 20 messages of 1024 B, QUEEN_SWEEPER_LEASE_MS=30000 QUEEN_SWEEPER_STATEMENT_TIMEOUT_MS=5000
--   symptom:  a fire that outlives its lease under push load: segments come back stale or fires time out
--   observed: stale segments + failed calls per value: 100: 2.0; 200: 0.0; 500: 0.0; 1000: 0.0; 4000: 0.0; 30000: 0.0. Edge of the symptom: 200. the shipped value is on the safe side.

-- [measured 2026-12-02] QUEEN_SWEEPER_CLAIM_BATCH = 200
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 1 broker, a backlog of 40000 timers, 512 B payloads, QUEEN_SWEEPER_CLAIM_BATCH=200
--   symptom:  small claims pay a round trip for a few rows: a backlog drains slowly
--   observed: drain rate (timers/s, one broker) per value: 10: 2572; 50: 7212; 200: 13167; 800: 18008; 2000: 19154. Edge of the symptom: 800. THE SHIPPED VALUE SHOWS THE SYMPTOM.

-- [measured 2026-12-02] QUEEN_SWEEPER_CYCLE_MAX_ROWS = 5000
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 1 broker, a backlog of 40000 timers, 512 B payloads, QUEEN_SWEEPER_CLAIM_BATCH=200 QUEEN_SWEEPER_CYCLE_MAX_ROWS=5000
--   symptom:  a short pass re-probes and sleeps the floor between passes: a backlog drains slowly
--   observed: drain rate (timers/s, one broker) per value: 200: 7102; 1000: 11021; 5000: 14111; 20000: 13969. Edge of the symptom: 5000. the shipped value is on the safe side.

-- [measured 2026-12-02] QUEEN_SWEEPER_MAX_FIRE_BYTES = 1048576
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 1 broker, a backlog of 3000 timers, 65536 B payloads, 4 pushers × 50/s × 5 messages of 1024 B, QUEEN_SWEEPER_MAX_FIRE_BYTES=1048576
--   symptom:  one big fire transaction holds partition locks and the WAL while pushes wait: push p99 degrades
--   observed: push p99 (ms) while a 64 KiB-payload backlog fires; value 0 = no sweeper (drain rate (timers/s) in brackets) per value: 0: 2.4 (0.0); 262144: 3.1 (1115); 1048576: 4.6 (2012); 8388608: 16.7 (2426); 67108864: 8.0 (2407). Edge of the symptom: 1048576. the shipped value is on the safe side.

-- [measured 2026-12-02] QUEEN_SWEEPER_MAX_SLEEP_MS = 1000
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 2 brokers, 20 timers/s, 512 B payloads, QUEEN_SWEEPER_MAX_SLEEP_MS=1000
--   symptom:  a timer committed where no local wake reaches (another broker) waits up to the ceiling
--   observed: lateness p99 (ms) of timers scheduled with no wake per value: 250: 41.2; 1000: 93.3; 4000: 2429. the shipped value is on the safe side.

-- [measured 2026-12-03] QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS = 25
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=100), url; 5 brokers, 300 timers every 1 s in one burst, 8192 B payloads, 2 pushers × 50/s × 20 messages of 512 B, 1 due timers held locked by another transaction, QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS=25 QUEEN_SWEEPER_EMPTY_CLAIM_MAX_MS=200
--   symptom:  after an empty claim, coming back at once is a spin: the probe says work is due, the claim takes nothing, and the loop asks again while another transaction holds the rows
--   observed: probe + claim calls/s, all brokers, with one due row held locked (lateness p99 (ms) of the bursts in brackets) per value: 5: 248 (185); 25: 83.7 (147); 100: 26.3 (415). Edge of the symptom: 25. the shipped value is on the safe side.

-- [measured 2026-12-03] QUEEN_SWEEPER_EMPTY_CLAIM_MAX_MS = 200
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=100), url; 5 brokers, 300 timers every 1 s in one burst, 8192 B payloads, 2 pushers × 50/s × 20 messages of 512 B, 1 due timers held locked by another transaction, QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS=25 QUEEN_SWEEPER_EMPTY_CLAIM_MAX_MS=200
--   symptom:  after an empty claim, coming back at once is a spin: the probe says work is due, the claim takes nothing, and the loop asks again while another transaction holds the rows
--   observed: probe + claim calls/s, all brokers, with one due row held locked (lateness p99 (ms) of the bursts in brackets) per value: 5: 248 (185); 25: 83.7 (147); 100: 26.3 (415). Edge of the symptom: 25. the shipped value is on the safe side.

-- [measured 2026-12-02] QUEEN_SWEEPER_MIN_SLEEP_MS = 5
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 1 broker, a backlog of 40000 timers, 512 B payloads, QUEEN_SWEEPER_MIN_SLEEP_MS=5 QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS=25
--   symptom:  a floor too long leaves due work waiting between passes; a shorter one probes more for nothing
--   observed: drain rate (timers/s, one broker, shipped pass budget) (probes/s in brackets) per value: 1: 13718 (1.3); 5: 12688 (1.3); 50: 11431 (1.3); 200: 8964 (1.2). Edge of the symptom: 5. the shipped value is on the safe side.

-- [measured 2026-12-02] QUEEN_KV_EXPIRE_EVERY_MS = 1000
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 1 broker, 400 KV puts/s, TTL 100-300 ms, QUEEN_KV_EXPIRE_BATCH=50 QUEEN_KV_EXPIRE_EVERY_MS=1000
--   symptom:  a prune slower than the expiry rate: expired-but-present rows grow without bound (reads stay correct; the heap grows for good)
--   observed: growth of expired-not-pruned (rows/s, second half of the run), prune batch 50 per value: 250: 0.0; 1000: 0.0; 4000: 202; 16000: 692. Edge of the symptom: 1000. the shipped value is on the safe side.

-- [measured 2026-12-02] QUEEN_KV_EXPIRE_BATCH = 1000
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 1 broker, 400 KV puts/s, TTL 100-300 ms, QUEEN_KV_EXPIRE_BATCH=1000
--   symptom:  a prune budget smaller than the expiry rate: expired-but-present rows grow without bound
--   observed: growth of expired-not-pruned (rows/s, second half of the run) per value: 1: 397; 5: 334; 50: 0.0; 1000: 0.0. Edge of the symptom: 50. the shipped value is on the safe side.

-- [measured 2026-12-02] log_timers fillfactor = 100
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 2 brokers, 300 timers/s, 512 B payloads
--   symptom:  free space per page that claims cannot use: a claim rewrites visible_at, which is indexed, so it is never a HOT update
--   observed: log_timers heap + index bytes at the end per value: 100: 3391488; 90: 4079616; 70: 4841472. the shipped value is on the safe side.

