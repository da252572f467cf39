-- Dated blocks from `soak experiments`, written on 2026-12-05 by rig 2c-24g-pg15; each block names the
-- day and the rig it was measured on (a run with --only keeps the other settings' blocks).
-- Apply them with `soak apply-blocks <this directory>`.

-- [measured 2026-12-05] QUEEN_KV_USAGE_EVERY_MS = 300000
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 1 000 tenants, KV rows as listed, a fifth as many pending timers
--   commit:   d852934
--   symptom:  the rollup's cost tracks the tables' size: run too often, it takes a connection's time from the fire
--   observed: 3 runs per value. one full rollup's time (ms) by KV rows (safe under 654.5), median [min–max] per value: 10000: 63.5 [63.5–65.8]; 100000: 191 [117–198]; 400000: 608 [444–654]. At 1% of one connection the cadence must be at least 65350 ms for the slowest rollup of the largest table; at the shipped 300000 ms it uses 0.218% of one connection. The other side (how stale the usage figures may be) is the cadence itself, not a measurement.
--   decision: 300000, by the rule at the top of 001_log_schema.sql (shipped was 300000): the shipped cadence is above the 1% cadence 65350 ms.

-- [measured 2026-12-05] QUEEN_SWEEPER_LEASE_MS = 30000
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 3 brokers, a backlog of 20000 timers, 4096 B payloads, 4 pushers × 100/s × 20 messages of 1024 B, QUEEN_SWEEPER_STATEMENT_TIMEOUT_MS=50 QUEEN_SWEEPER_FIRE_TAKE=0
--   commit:   d852934
--   symptom:  on the leased path, a fire that outlives its lease under push load: segments come back stale or fires time out; against it: a crashed broker's claimed timers wait out its lease
--   observed: 3 runs per value. (1) stale segments + failed calls (safe at 0), median [min–max] per value: 100: 3.0 [3.0–4.0]; 200: 1.0 [0.0–2.0]; 500: 0.0 [0.0–0.0]; 2000: 0.0 [0.0–0.0]; 8000: 0.0 [0.0–0.0]; 10000: 0.0 [0.0–0.0]; 30000: 0.0 [0.0–0.0]. Edge 500, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the edge 500 overlaps its neighbour 200 (ranges (0.0, 0.0) and (0.0, 2.0)). (2) lateness (ms) of the latest timer due before a SIGKILL mid-drain and fired after it (safe within 1× the value + 5000), median [min–max] per value: 2000: 1677 [1616–2802]; 8000: 8446 [1591–8487]; 10000: 10486 [10428–10502]; 30000: 30491 [1384–30540]. Edge 30000, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the symptom did not appear at 30000, the sweep's end: the edge is there or beyond.
--   decision: 30000, by the rule at the top of 001_log_schema.sql (shipped was 30000): the edge 500 is not resolved: one step beyond it; the value in force lies beyond it and is safe on every side.

-- [measured 2026-12-05] QUEEN_SWEEPER_CLAIM_BATCH = 200
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 1 broker, a backlog of 40000 timers, 20 timers/s, 512 B payloads, the stream a tenant of its own
--   commit:   d852934
--   symptom:  small claims pay a round trip for a few rows: a backlog drains slowly; against it: big claims make a small tenant's timers wait behind a big tenant's backlog
--   observed: 3 runs per value. (1) drain rate of the backlog (timers/s, one broker) (safe within 10% of the best), median [min–max] per value: 50: 10294 [7761–10880]; 200: 17334 [15960–17929]; 800: 25745 [23906–36417]; 2000: 28655 [22620–33779]. Edge 2000, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the edge 2000 overlaps its neighbour 800 (ranges (22620.0, 33779.0) and (23906.0, 36417.0)). (2) lateness p99 (ms) of a small tenant's 20 timers/s behind a 40 000-timer backlog (safe within 2× of the least), median [min–max] per value: 50: 3168 [3050–4465]; 200: 1700 [1600–1909]; 800: 1138 [541–1273]; 2000: 795 [637–1370]. Edge 2000, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the symptom did not appear at 2000, the sweep's end: the edge is there or beyond.
--   decision: none; 200 stays in force: the edge 2000 is not resolved: one step beyond it; the sweep measured nothing beyond it.

-- [measured 2026-12-05] QUEEN_SWEEPER_CYCLE_MAX_ROWS = 5000
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 1 broker, a backlog of 40000 timers, 20 timers/s, 512 B payloads, the stream a tenant of its own, QUEEN_SWEEPER_CLAIM_BATCH=200
--   commit:   d852934
--   symptom:  a short pass re-probes and sleeps the floor between passes: a backlog drains slowly; against it: a long pass does not look up from the backlog: a small tenant's timers wait
--   observed: 3 runs per value. (1) drain rate of the backlog (timers/s, one broker) (safe within 10% of the best), median [min–max] per value: 200: 7815 [7234–8055]; 1000: 14705 [13357–15625]; 5000: 17253 [16836–21363]; 20000: 23167 [16744–24987]. Edge 20000, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the edge 20000 overlaps its neighbour 5000 (ranges (16744.0, 24987.0) and (16836.0, 21363.0)). (2) lateness p99 (ms) of a small tenant's 20 timers/s behind a 40 000-timer backlog (safe within 2× of the least), median [min–max] per value: 200: 148 [109–160]; 1000: 2148 [1210–2408]; 5000: 1723 [1376–1780]; 20000: 1138 [1010–1791]. Edge 200.
--   decision: none; 5000 stays in force: the edge 20000 is not resolved: one step beyond it; the sweep measured nothing beyond it.

-- [measured 2026-12-05] QUEEN_SWEEPER_MAX_FIRE_BYTES = 8388608
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 0 brokers, a backlog of 3000 timers, 65536 B payloads, 4 pushers × 50/s × 5 messages of 1024 B
--   commit:   d852934
--   symptom:  one big fire transaction holds partition locks and the WAL while pushes wait: push p99 degrades; against it: small fires pay a commit per few timers: a backlog of big payloads drains slowly
--   observed: 3 runs per value. (1) push p99 (ms) while a 64 KiB-payload backlog fires; value 0 = no sweeper (safe within 2× of the run without a sweeper), median [min–max] per value: 0: 3.3 [2.5–10.4]; 262144: 4.7 [4.4–13.0]; 1048576: 4.1 [3.8–12.4]; 8388608: 3.6 [2.8–14.0]; 67108864: 5.2 [3.8–8.6]. Edge 67108864, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the symptom did not appear at 67108864, the sweep's end: the edge is there or beyond. (2) drain rate (timers/s) of the 64 KiB backlog (safe within 20% of the best), median [min–max] per value: 0: 0.0 [0.0–0.0]; 262144: 1070 [793–1112]; 1048576: 5148 [3291–6497]; 8388608: 17988 [11031–18595]; 67108864: 22196 [16355–22789]. Edge 8388608.
--   decision: 8388608, by the rule at the top of 001_log_schema.sql (shipped was 1048576): the edge 67108864 is not resolved: one step beyond it.

-- [measured 2026-12-05] QUEEN_SWEEPER_MAX_SLEEP_MS = 1000
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 2 brokers, 20 timers/s, 512 B payloads
--   commit:   d852934
--   symptom:  a timer committed where no local wake reaches (another broker) waits up to the ceiling; against it: a short ceiling probes an idle database for nothing
--   observed: 3 runs per value. (1) lateness p99 (ms) of timers scheduled with no wake (safe within 1.2× the value + 0), median [min–max] per value: 250: 15.6 [14.3–19.1]; 1000: 88.8 [81.3–92.5]; 4000: 3099 [3088–3099]. (2) probes/s per broker at 20 timers/s (safe within 4× of the least), median [min–max] per value: 250: 18.3 [17.9–18.4]; 1000: 17.8 [17.8–17.9]; 4000: 12.7 [12.4–12.7]. Edge 250, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the symptom did not appear at 250, the sweep's end: the edge is there or beyond.
--   decision: 1000, by the rule at the top of 001_log_schema.sql (shipped was 1000): no edge is sought on side 1; the shipped value is safe on every side.

-- [measured 2026-12-05] QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS = 25
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 5 brokers, 300 timers every 1 s in one burst, 8192 B payloads, 2 pushers × 50/s × 20 messages of 512 B, 1 due timers held locked by another transaction, QUEEN_SWEEPER_EMPTY_CLAIM_MAX_MS=40
--   commit:   d852934
--   symptom:  after an empty claim, coming back at once is a spin: the probe says work is due, the claim takes nothing, and the loop asks again while another transaction holds the rows; against it: a long sleep after an empty claim leaves the next burst waiting
--   observed: 3 runs per value. (1) probe + claim calls/s, all brokers, with one due row held locked (the band's top at 8× its bottom) (safe at most 50% of the smallest value's), median [min–max] per value: 5: 334 [332–341]; 25: 88.8 [88.5–89.6]; 100: 27.0 [26.0–27.8]. Edge 25. (2) lateness p99 (ms) of the bursts (safe within 2× of the least), median [min–max] per value: 5: 39.5 [33.3–65.2]; 25: 86.5 [57.3–118]; 100: 239 [167–292]. Edge 5, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the edge 5 overlaps its neighbour 25 (ranges (33.3, 65.2) and (57.3, 118.3)).
--   decision: none; 25 stays in force: the edge 25 is resolved; 25 shows side 2's symptom (lateness p99 (ms) of the bursts); 100 shows side 2's symptom (lateness p99 (ms) of the bursts).

-- [measured 2026-12-05] QUEEN_SWEEPER_EMPTY_CLAIM_MAX_MS = 200
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 5 brokers, 300 timers every 1 s in one burst, 8192 B payloads, 2 pushers × 50/s × 20 messages of 512 B, 1 due timers held locked by another transaction, QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS=25
--   commit:   d852934
--   symptom:  a narrow band keeps the brokers that found nothing in step: they probe and claim together; against it: a wide band leaves the next burst waiting
--   observed: 3 runs per value. (1) probe + claim calls/s, all brokers, with one due row held locked (the band's bottom at the shipped 25 ms) (safe at most 50% of the smallest value's), median [min–max] per value: 25: 308 [304–309]; 200: 91.0 [90.4–91.5]; 800: 28.6 [26.6–29.5]. Edge 200. (2) lateness p99 (ms) of the bursts (safe within 2× of the least), median [min–max] per value: 25: 44.8 [41.2–50.9]; 200: 58.9 [53.2–136]; 800: 230 [150–396]. Edge 200.
--   decision: 200, by the rule at the top of 001_log_schema.sql (shipped was 200): the edge 200 is resolved; the value in force lies beyond it and is safe on every side.

-- [measured 2026-12-05] QUEEN_SWEEPER_MIN_SLEEP_MS = 1
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 1 broker, a backlog of 40000 timers, 512 B payloads, QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS=25
--   commit:   d852934
--   symptom:  a floor too long leaves due work waiting between passes; against it: a floor too short probes again at once after a pass that left work: under a steady stream, more probes for the same timers
--   observed: 3 runs per value. (1) drain rate (timers/s, one broker, shipped pass budget) (safe within 10% of the best), median [min–max] per value: 1: 19801 [15661–23260]; 5: 19330 [15679–22697]; 50: 16625 [15924–19330]; 200: 11076 [10534–11292]. Edge 5, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the edge 5 overlaps its neighbour 50 (ranges (15679.0, 22697.0) and (15924.0, 19330.0)). (2) probes/s per broker, 3 brokers, 600 timers/s due within 0-200 ms (safe within 2× of the least), median [min–max] per value: 1: 41.2 [36.3–41.4]; 5: 34.4 [32.4–34.5]; 50: 23.8 [21.1–24.1]; 200: 23.0 [21.7–23.2]. Edge 1, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the symptom did not appear at 1, the sweep's end: the edge is there or beyond.
--   decision: 1, by the rule at the top of 001_log_schema.sql (shipped was 5): the edge 5 is not resolved: one step beyond it.

-- [measured 2026-12-05] QUEEN_KV_EXPIRE_EVERY_MS = 1000
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 1 broker, 2 pushers × 50/s × 10 messages of 512 B, 400 KV puts/s, TTL 100-300 ms, QUEEN_KV_EXPIRE_BATCH=50
--   commit:   d852934
--   symptom:  a prune slower than the expiry rate: expired-but-present rows grow without bound (reads stay correct; the heap grows for good); against it: a prune run too often takes the partitions' neighbours' time: pushes wait
--   observed: 3 runs per value. (1) growth of expired-not-pruned (rows/s, second half of the run), prune batch 50 (safe under 1), median [min–max] per value: 250: 0.0 [0.0–0.0]; 1000: 0.0 [0.0–0.0]; 4000: 402 [402–403]; 16000: 401 [401–407]. Edge 1000. (2) push p99 (ms), 2 pushers × 50/s (safe within 2× of the least), median [min–max] per value: 250: 4.2 [2.7–5.8]; 1000: 2.5 [2.0–2.5]; 4000: 2.4 [2.2–2.9]; 16000: 4.0 [4.0–8.9]. Edge 250, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the symptom did not appear at 250, the sweep's end: the edge is there or beyond; non-monotonic: 250 → 1000 moves 4.2 → 2.5, then 4000 → 16000 moves 2.4 → 4.0.
--   decision: 1000, by the rule at the top of 001_log_schema.sql (shipped was 1000): the edge 1000 is resolved; the value in force lies beyond it and is safe on every side.

-- [measured 2026-12-05] QUEEN_KV_EXPIRE_BATCH = 1000
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 1 broker, 2 pushers × 50/s × 10 messages of 512 B, 400 KV puts/s, TTL 100-300 ms
--   commit:   d852934
--   symptom:  a prune budget smaller than the expiry rate: expired-but-present rows grow without bound; against it: a big delete holds the WAL and the pages pushes need: push p99 degrades
--   observed: 3 runs per value. (1) growth of expired-not-pruned (rows/s, second half of the run) (safe under 1), median [min–max] per value: 5: 338 [329–338]; 50: 0.0 [0.0–0.0]; 1000: 0.0 [0.0–0.0]; 10000: 0.0 [0.0–0.0]. Edge 50. (2) push p99 (ms), 2 pushers × 50/s (safe within 2× of the least), median [min–max] per value: 5: 6.1 [5.2–7.9]; 50: 5.3 [3.4–6.5]; 1000: 6.4 [2.5–7.2]; 10000: 4.9 [2.3–13.1]. Edge 10000, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the symptom did not appear at 10000, the sweep's end: the edge is there or beyond.
--   decision: 1000, by the rule at the top of 001_log_schema.sql (shipped was 1000): the edge 50 is resolved; the value in force lies beyond it and is safe on every side.

-- [measured 2026-12-05] log_timers fillfactor = 100
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 2 brokers, 300 timers/s, 512 B payloads
--   commit:   d852934
--   symptom:  free space per page that claims cannot use: a claim rewrites visible_at, which is indexed, so it is never a HOT update
--   observed: 3 runs per value. (1) log_timers heap + index bytes at the end (safe within 1.25× of the least), median [min–max] per value: 100: 1024000 [958464–1605632]; 90: 1916928 [1179648–1925120]; 70: 1556480 [1384448–2310144].
--   decision: 100, by the rule at the top of 001_log_schema.sql (shipped was 100): no edge is sought on side 1; the shipped value is safe on every side.

