-- Queen: the message log (queues, partitions with their offset allocator, messages).
--
-- HOW A SETTING EARNS ITS NUMBER (the dated-block convention)
--
-- Every number in this directory, and every default of the sweeper's QUEEN_* knobs, is either
-- measured or says plainly that it is not. A measured setting carries a dated block:
--
--   -- [measured 2026-12-02] QUEEN_SWEEPER_LEASE_MS = 30000
--   --   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (shared_buffers=128MB,
--   --             synchronous_commit=on, max_connections=100), 3 brokers, 400 timers/s
--   --   symptom:  under 8 pushers on 4 partitions, leases below 4000 ms come back stale
--   --   observed: 0 stale segments at 30000 ms; 112 stale segments/min at 3000 ms
--
-- that is: the setting and its value, the date it was measured, the rig it was measured on (cores,
-- memory, PostgreSQL version and the settings that matter, broker count, load), the symptom the
-- setting guards against, and the number observed. A number from a live stack is never a
-- measurement; only a soak on a test rig is (`soak experiments`, which writes
-- reports/<date>-<rig>/blocks.sql, and `soak apply-blocks <dir>`, which replaces the markers).
--
-- A block also names the commit the soak was built from (`--   commit:`; `soak blocks --check`
-- calls a block stale once a file its setting governs changes its code after that commit), and,
-- since 2026-12-05, the decision its numbers gave (`--   decision:`).
--
-- THE DECISION RULE (applied by code: soak/src/experiments.rs, `decide`; nowhere else)
--
-- Each experiment measures both sides of its setting's trade-off: side 1 is the symptom the
-- setting exists for, the others what pushing the value away from that symptom costs. Every
-- value is run at least three times; a side's number for a value is the median of its runs, and
-- each side states when a median is safe (zero stale segments, within 10% of the best drain, at
-- most twice the least lateness, ...).
--   1. The edge of side 1 is the measured value where its symptom stops: the smallest safe value
--      when small values show it, the largest when large ones do.
--   2. The margin: the edge itself when it is resolved (the min-max range of its runs clears the
--      range of its neighbour on the symptom side); one measured step further into the safe side
--      when it is not (the ranges overlap, or the sweep never showed the symptom). An edge at
--      the bound of what the sweeper's config accepts (the floor's 1 ms, a claim batch equal to
--      the pass) has no step beyond it: there, the margin is the edge itself.
--   3. Least change: the value in force stays when it already lies at or beyond that point and
--      every side finds it safe (a default moves only when a measurement demands it). Otherwise,
--      from that point further into the safe side, the shipped value is the first measured value
--      that every side measured and found safe, and that the sweeper's config accepts with every
--      other knob at its default.
--   4. No such value: no decision. The block says why (`decision: none`) and the value in force
--      stays until a person decides. `soak apply-blocks` writes such a block in place of the
--      older one only when it was measured at the value in force (its numbers are the newest
--      of the default shipped; the default is not touched), and `soak blocks --check` lists it
--      as UNDECIDED, not current (since 2026-12-07).
--   A side with no edge to seek (a cost that only has to stay acceptable, as a table's size under
--   a fillfactor) keeps the shipped value when it is safe on every side.
-- `soak apply-blocks <dir>` writes each block here and the value it decided as the knob's default
-- in sweeper/src/config.rs, together, or writes nothing and says why; a test
-- (`every_block_in_sql_records_the_default_the_sweeper_ships`) fails when the two disagree.
--
-- A setting that has not been measured yet carries exactly one marker line, which the soak
-- replaces with its block:
--
--   -- [not measured] NAME = VALUE: why this value was guessed
--
-- The knobs of the sweeper process live in the Rust binary (sweeper/src/config.rs), but their
-- numbers are recorded here, in one place, so an operator reads every guess of the system at once.
--
-- SWEEPER KNOBS
-- [measured 2026-12-07] QUEEN_SWEEPER_LEASE_MS = 30000
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 3 brokers, a backlog of 20000 timers, 4096 B payloads, 4 pushers × 100/s × 20 messages of 1024 B, QUEEN_SWEEPER_STATEMENT_TIMEOUT_MS=50 QUEEN_SWEEPER_FIRE_TAKE=0
--   commit:   4d44f85 (dirty)
--   symptom:  on the leased path, a fire that outlives its lease under push load: segments come back stale or fires time out; against it: a crashed broker's claimed timers wait out its lease
--   observed: 3 runs per value. (1) stale segments + failed calls (safe at 0), median [min–max] per value: 100: 8.0 [6.0–9.0]; 200: 3.0 [3.0–4.0]; 500: 0.0 [0.0–1.0]; 2000: 0.0 [0.0–0.0]; 8000: 0.0 [0.0–0.0]; 10000: 0.0 [0.0–0.0]; 30000: 0.0 [0.0–0.0]. Edge 500. (2) lateness (ms) of the latest timer due before a SIGKILL mid-drain and fired after it (safe within 1× the value + 5000), median [min–max] per value: 2000: 2400 [784–2490]; 8000: 8512 [857–8544]; 10000: 10469 [1113–10494]; 30000: 30474 [30442–30507]. Edge 30000, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the symptom did not appear at 30000, the sweep's end: the edge is there or beyond.
--   decision: 30000, by the rule at the top of 001_log_schema.sql (shipped was 30000): the edge 500 is resolved; the value in force lies beyond it and is safe on every side.
-- [measured 2026-12-07] QUEEN_SWEEPER_CLAIM_BATCH = 800
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 1 broker, a backlog of 40000 timers, 20 timers/s, 512 B payloads, the stream a tenant of its own
--   commit:   4d44f85 (dirty)
--   symptom:  small claims pay a round trip for a few rows: a backlog drains slowly; against it: big claims make a small tenant's timers wait behind a big tenant's backlog
--   observed: 3 runs per value. (1) drain rate of the backlog (timers/s, one broker) (safe within 10% of the best), median [min–max] per value: 50: 55108 [54448–57758]; 200: 58385 [57922–58570]; 800: 55623 [54733–60050]; 2000: 58828 [54932–64462]; 5000: 59680 [52278–64289]. Edge 50, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the symptom did not appear at 50, the sweep's end: the edge is there or beyond. (2) lateness p99 (ms) of a small tenant's 20 timers/s behind a 40 000-timer backlog (safe within 2× of the least), median [min–max] per value: 50: 14.1 [12.3–18.0]; 200: 20.2 [17.9–20.5]; 800: 15.7 [15.2–16.0]; 2000: 14.7 [13.3–20.5]; 5000: 21.5 [18.3–23.4]. Edge 5000, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the symptom did not appear at 5000, the sweep's end: the edge is there or beyond.
--   decision: 800, by the rule at the top of 001_log_schema.sql (shipped was 800): the edge 50 is not resolved: one step beyond it; the value in force lies beyond it and is safe on every side.
-- [measured 2026-12-07] QUEEN_SWEEPER_CYCLE_MAX_ROWS = 60000
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 1 broker, a backlog of 40000 timers, 20 timers/s, 512 B payloads, the stream a tenant of its own, QUEEN_SWEEPER_CLAIM_BATCH=200
--   commit:   4d44f85 (dirty)
--   symptom:  a short pass re-probes and sleeps the floor between passes: a backlog drains slowly; against it: a long pass does not look up from the backlog: a small tenant's timers wait
--   observed: 3 runs per value. (1) drain rate of the backlog (timers/s, one broker) (safe within 10% of the best), median [min–max] per value: 200: 11428 [10520–12408]; 1000: 26776 [21894–26798]; 5000: 35675 [33176–38078]; 20000: 42010 [38030–45065]; 60000: 55861 [50391–59259]. Edge 60000. (2) lateness p99 (ms) of a small tenant's 20 timers/s behind a 40 000-timer backlog (safe within 2× of the least), median [min–max] per value: 200: 53.9 [39.2–54.6]; 1000: 39.4 [38.6–99.5]; 5000: 34.5 [32.2–38.5]; 20000: 51.3 [47.0–58.0]; 60000: 20.9 [16.4–23.2]. Edge 60000, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the symptom did not appear at 60000, the sweep's end: the edge is there or beyond; non-monotonic: 1000 → 5000 moves 39.4 → 34.5, then 5000 → 20000 moves 34.5 → 51.3.
--   decision: 60000, by the rule at the top of 001_log_schema.sql (shipped was 60000): the edge 60000 is resolved; the value in force lies beyond it and is safe on every side.
-- [measured 2026-12-07] QUEEN_SWEEPER_MAX_FIRE_BYTES = 33554432
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 0 brokers, a backlog of 1000 timers, 262144 B incompressible payloads, 4 pushers × 50/s × 5 messages of 1024 B
--   commit:   4d44f85 (dirty)
--   symptom:  one big fire transaction holds partition locks and the WAL while pushes wait: push p99 degrades; against it: small fires pay a commit per few timers: a backlog of big payloads drains slowly
--   observed: 3 runs per value. (1) push p99 (ms, from each push's scheduled start) while a backlog of 256 KiB incompressible payloads fires; value 0 = no sweeper, shown, not judged (safe within 2× of the smallest value above 0), median [min–max] per value: 0: 3.7 [3.5–4.7]; 1048576: 8.1 [7.7–10.9]; 4194304: 16.2 [15.2–19.0]; 8388608: 261 [152–333]; 16777216: 665 [588–797]; 33554432: 761 [699–843]; 67108864: 852 [796–938]. Edge 4194304. (2) drain rate (timers/s) of the backlog of 256 KiB incompressible payloads (safe within 20% of the best), median [min–max] per value: 0: 0.0 [0.0–0.0]; 1048576: 403 [403–412]; 4194304: 725 [663–766]; 8388608: 692 [657–801]; 16777216: 768 [648–811]; 33554432: 824 [821–902]; 67108864: 919 [824–933]. Edge 16777216, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the edge 16777216 overlaps its neighbour 8388608 (ranges (648.0, 811.0) and (657.0, 801.0)).
--   decision: none; 33554432 stays in force: the edge 4194304 is resolved; 4194304 shows side 2's symptom (drain rate (timers/s) of the backlog of 256 KiB incompressible payloads); 1048576 shows side 2's symptom (drain rate (timers/s) of the backlog of 256 KiB incompressible payloads); 0 shows side 1's symptom (push p99 (ms, from each push's scheduled start) while a backlog of 256 KiB incompressible payloads fires; value 0 = no sweeper, shown, not judged).
-- [measured 2026-12-07] QUEEN_SWEEPER_MAX_SLEEP_MS = 1000
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 2 brokers, 20 timers/s, 512 B payloads
--   commit:   4d44f85 (dirty)
--   symptom:  a timer committed where no local wake reaches (another broker) waits up to the ceiling; against it: a short ceiling probes an idle database for nothing
--   observed: 3 runs per value. (1) lateness p99 (ms) of timers scheduled with no wake (safe within 1.2× the value + 0), median [min–max] per value: 250: 18.4 [12.5–27.7]; 1000: 97.5 [84.2–114]; 4000: 3021 [3021–3039]. (2) probes/s per broker at 20 timers/s (safe within 4× of the least), median [min–max] per value: 250: 19.0 [18.9–19.5]; 1000: 18.6 [18.1–18.9]; 4000: 15.1 [14.5–15.2]. Edge 250, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the symptom did not appear at 250, the sweep's end: the edge is there or beyond.
--   decision: 1000, by the rule at the top of 001_log_schema.sql (shipped was 1000): no edge is sought on side 1; the shipped value is safe on every side.
-- [measured 2026-12-07] QUEEN_SWEEPER_MIN_SLEEP_MS = 1
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 1 broker, a backlog of 40000 timers, 512 B payloads, QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS=25
--   commit:   4d44f85 (dirty)
--   symptom:  a floor too long leaves due work waiting between passes; against it: a floor too short probes again at once after a pass that left work: under a steady stream, more probes for the same timers
--   observed: 3 runs per value. (1) drain rate (timers/s, one broker, shipped pass budget) (safe within 10% of the best), median [min–max] per value: 1: 53861 [48928–53920]; 5: 54312 [52251–55240]; 50: 55609 [55306–55896]; 200: 53461 [53028–55075]. Edge 200, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the symptom did not appear at 200, the sweep's end: the edge is there or beyond; non-monotonic: 5 → 50 moves 54312 → 55609, then 50 → 200 moves 55609 → 53461. (2) probes/s per broker, 3 brokers, 600 timers/s due within 0-200 ms (safe within 2× of the least), median [min–max] per value: 1: 46.0 [45.9–50.2]; 5: 41.7 [40.1–42.1]; 50: 24.4 [24.0–24.6]; 200: 23.1 [23.0–23.3]. Edge 1, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the symptom did not appear at 1, the sweep's end: the edge is there or beyond.
--   decision: 1, by the rule at the top of 001_log_schema.sql (shipped was 1): the edge 200 is not resolved: one step beyond it; the value in force lies beyond it and is safe on every side.
-- [measured 2026-12-07] QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS = 15
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 5 brokers, 300 timers every 1 s in one burst, 8192 B payloads, 2 pushers × 50/s × 20 messages of 512 B, 1 due timers held locked by another transaction, QUEEN_SWEEPER_EMPTY_CLAIM_MAX_MS=40
--   commit:   4d44f85 (dirty)
--   symptom:  after an empty claim, coming back at once is a spin: the probe says work is due, the claim takes nothing, and the loop asks again while another transaction holds the rows; against it: a long sleep after an empty claim leaves the next burst waiting
--   observed: 3 runs per value. (1) probe + claim calls/s, all brokers, with one due row held locked (the band's top at 8× its bottom) (safe at most 50% of the smallest value's), median [min–max] per value: 5: 361 [360–371]; 10: 202 [198–202]; 15: 141 [141–143]; 25: 88.2 [86.0–90.8]; 100: 24.6 [23.9–25.2]. Edge 15. (2) lateness p99 (ms) of the bursts (safe within 2× of the least), median [min–max] per value: 5: 33.7 [25.8–37.0]; 10: 36.5 [33.1–36.6]; 15: 50.8 [35.0–51.6]; 25: 48.3 [46.1–59.2]; 100: 224 [126–232]. Edge 25.
--   decision: 15, by the rule at the top of 001_log_schema.sql (shipped was 15): the edge 15 is resolved; the value in force lies beyond it and is safe on every side.
-- [measured 2026-12-07] QUEEN_SWEEPER_EMPTY_CLAIM_MAX_MS = 200
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 5 brokers, 300 timers every 1 s in one burst, 8192 B payloads, 2 pushers × 50/s × 20 messages of 512 B, 1 due timers held locked by another transaction, QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS=15
--   commit:   e98611e
--   symptom:  a narrow band keeps the brokers that found nothing in step: they probe and claim together; against it: a wide band leaves the next burst waiting
--   observed: 3 runs per value. (1) probe + claim calls/s, all brokers, with one due row held locked (the band's bottom at the shipped minimum) (safe at most 50% of the smallest value's), median [min–max] per value: 25: 315 [313–317]; 50: 230 [227–235]; 100: 148 [144–152]; 200: 85.7 [85.6–90.9]; 400: 48.8 [48.1–50.8]; 800: 26.2 [25.8–27.1]. Edge 100. (2) lateness p99 (ms) of the bursts (safe within 2× of the least), median [min–max] per value: 25: 57.6 [49.8–59.7]; 50: 51.9 [50.1–58.0]; 100: 60.2 [45.2–97.9]; 200: 75.8 [65.8–76.3]; 400: 100 [80.2–133]; 800: 278 [158–279]. Edge 400.
--   decision: 200, by the rule at the top of 001_log_schema.sql (shipped was 200): the edge 100 is resolved; the value in force lies beyond it and is safe on every side.
-- [measured 2026-12-07] QUEEN_KV_EXPIRE_EVERY_MS = 1000
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 1 broker, 2 pushers × 50/s × 10 messages of 512 B, 400 KV puts/s, TTL 100-300 ms, QUEEN_KV_EXPIRE_BATCH=50
--   commit:   5826b07
--   symptom:  a prune slower than the expiry rate: expired-but-present rows grow without bound (reads stay correct; the heap grows for good); against it: a prune run too often takes the partitions' neighbours' time: pushes wait
--   observed: 3 runs per value. (1) growth of expired-not-pruned (rows/s, second half of the run), prune batch 50 (safe under 1), median [min–max] per value: 250: 0.0 [0.0–0.0]; 1000: 0.0 [0.0–0.0]; 4000: 244 [243–245]; 16000: 401 [400–401]. Edge 1000. (2) push p99 (ms), 2 pushers × 50/s (safe within 2× of the least), median [min–max] per value: 250: 4.4 [4.2–152]; 1000: 4.8 [3.5–5.1]; 4000: 4.0 [4.0–4.3]; 16000: 3.8 [3.8–4.6]. Edge 250, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the symptom did not appear at 250, the sweep's end: the edge is there or beyond.
--   decision: 1000, by the rule at the top of 001_log_schema.sql (shipped was 1000): the edge 1000 is resolved; the value in force lies beyond it and is safe on every side.
-- [measured 2026-12-07] QUEEN_KV_EXPIRE_BATCH = 1000
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 1 broker, 2 pushers × 50/s × 10 messages of 512 B, 400 KV puts/s, TTL 100-300 ms
--   commit:   5826b07
--   symptom:  a prune budget smaller than the expiry rate: expired-but-present rows grow without bound; against it: a big delete holds the WAL and the pages pushes need: push p99 degrades
--   observed: 3 runs per value. (1) growth of expired-not-pruned (rows/s, second half of the run) (safe under 1), median [min–max] per value: 5: 332 [331–334]; 50: 0.0 [0.0–0.0]; 1000: 0.0 [0.0–0.0]; 10000: 0.0 [0.0–0.0]. Edge 50. (2) push p99 (ms), 2 pushers × 50/s (safe within 2× of the least), median [min–max] per value: 5: 4.4 [3.8–4.6]; 50: 4.7 [3.5–4.8]; 1000: 4.0 [4.0–4.3]; 10000: 3.9 [3.8–5.1]. Edge 10000, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the symptom did not appear at 10000, the sweep's end: the edge is there or beyond.
--   decision: 1000, by the rule at the top of 001_log_schema.sql (shipped was 1000): the edge 50 is resolved; the value in force lies beyond it and is safe on every side.
-- [measured 2026-12-07] QUEEN_KV_USAGE_EVERY_MS = 300000
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 1 000 tenants, KV rows as listed, a fifth as many pending timers
--   commit:   398d97f
--   symptom:  the rollup's cost tracks the tables' size: run too often, it takes a connection's time from the fire
--   observed: 3 runs per value. one full rollup's time (ms) by KV rows (safe under 3000), median [min–max] per value: 10000: 33.9 [32.4–44.4]; 100000: 99.5 [95.6–115]; 400000: 378 [371–393]. At 1% of one connection the cadence must be at least 39330 ms for the slowest rollup of the largest table; at the shipped 300000 ms it uses 0.131% of one connection. The other side (how stale the usage figures may be) is the cadence itself, not a measurement.
--   decision: 300000, by the rule at the top of 001_log_schema.sql (shipped was 300000): the shipped cadence is above the 1% cadence 39330 ms.
-- [measured 2026-12-07] QUEEN_SWEEPER_BULK_BATCH = 20000
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 1 broker, a backlog of 40000 timers, 20 timers/s, 512 B payloads, the stream a tenant of its own, 4 pushers × 50/s × 5 messages of 512 B
--   commit:   4d44f85 (dirty)
--   symptom:  without the bulk lane, or with small bulk takes, every take pays its fixed cost for a few rows: a backlog drains slowly; against it: a big bulk take holds the locks of the backlog's partitions while pushes into them wait; against it: a big bulk take takes the server's time from the pass's small takes: a small tenant's timers wait
--   observed: 3 runs per value. (1) drain rate of the backlog (timers/s, one broker, CLAIM_BATCH 200) (safe within 10% of the best), median [min–max] per value: 0: 37390 [23510–42873]; 1000: 39677 [33041–41502]; 2000: 41095 [40815–45817]; 5000: 51438 [47467–53098]; 10000: 51562 [48735–52491]; 20000: 61199 [57937–61972]; 50000: 63869 [61943–71320]. Edge 20000. (2) push p99 (ms) into the backlog's partitions, 4 pushers × 50/s (safe within 2× of the least), median [min–max] per value: 0: 8.1 [7.1–15.6]; 1000: 10.4 [8.8–14.5]; 2000: 14.2 [11.4–22.0]; 5000: 22.9 [12.6–23.4]; 10000: 42.8 [39.2–45.1]; 20000: 56.2 [54.8–75.9]; 50000: 157 [79.1–198]. Edge 2000, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the edge 2000 overlaps its neighbour 5000 (ranges (11.4, 22.0) and (12.6, 23.4)). (3) lateness p99 (ms) of a small tenant's 20 timers/s behind a 40 000-timer backlog (safe within 2× of the least), median [min–max] per value: 0: 44.2 [36.2–109]; 1000: 19.2 [18.0–20.2]; 2000: 19.6 [18.6–19.9]; 5000: 18.0 [16.9–20.8]; 10000: 18.9 [16.3–22.6]; 20000: 19.4 [19.4–21.4]; 50000: 19.0 [18.8–22.7]. Edge 50000, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the symptom did not appear at 50000, the sweep's end: the edge is there or beyond.
--   decision: none; 20000 stays in force: the edge 20000 is resolved; 20000 shows side 2's symptom (push p99 (ms) into the backlog's partitions, 4 pushers × 50/s); 50000 shows side 2's symptom (push p99 (ms) into the backlog's partitions, 4 pushers × 50/s).
-- [not measured] QUEEN_SWEEPER_DUE_CAP = 2000: the probe stops counting due rows here; bounds its cost.
-- [not measured] QUEEN_SWEEPER_STATEMENT_TIMEOUT_MS = 5000: every call is cancelled server-side after this.
-- [not measured] QUEEN_SWEEPER_MAX_ATTEMPTS = 5: failed fires before a timer goes to the DLQ.
-- [not measured] QUEEN_SWEEPER_FIRE_TAKE = 1: each batch taken, fired and deleted in one transaction (the fire, version 2); 0 claims with a lease and fires by token (the seed's two-phase path), kept to compare.
-- [not measured] QUEEN_SWEEPER_HEAD_RESCAN_MS = 30000: how often the probe reads each shard from its start instead of from its head floor (011_timers_probe_claim.sql; the 64 shards take turns spread over the period, sweeper/src/floors.rs); the longest a row a floor hid (written by hand without the rule of 010_timers_schema.sql, or by a write slower than QUEEN_SWEEPER_HEAD_FLOOR_MARGIN_MS) waits. A held snapshot made a full read cost 128-164 ms at 150 000 dead rows (by hand at 8dbe3d7, single timings: reports/faults/2026-12-06-2c-24g-pg15/head-floors/by-hand.md), so 30 s keeps that under 1% of a connection, and a probe pays about a 64th of it.
-- [not measured] QUEEN_SWEEPER_HEAD_FLOOR_MARGIN_MS = 1000: how far a head floor stays below the probe's now; a schedule's transaction is milliseconds long, and one slower than this waits at most for the next read from the start. Every floored read walks the dead entries of this many milliseconds of fired timers under a held snapshot (at 5 000 ms, 2 500 entries a read at 500 timers/s).
--
-- API LIMITS (queen-sweeper serve; sweeper/broker/src/api/config.rs)
-- [not measured] QUEEN_TIMERS_MAX_PAYLOAD_BYTES = 262144: one timer's payload; SQS's familiar bound, far under one 8 MiB fire.
-- [not measured] QUEEN_TIMERS_MAX_OPS_PER_CALL = 1000: operations sharing one schedule transaction.
-- [not measured] QUEEN_TIMERS_MAX_HORIZON_S = 31536000: a year ahead; further is more likely a unit mistake than a plan.
-- [not measured] QUEEN_API_MAX_BODY_BYTES = 4194304: one request body; room for twelve base64-encoded payloads at their limit.
-- [not measured] QUEEN_API_MAX_KEY_BYTES = 512: a name; three of them fit a B-tree entry with room to spare.
-- [not measured] QUEEN_API_MAX_IN_FLIGHT = 64: requests served at once before a 503; eight per API connection.
-- [not measured] QUEEN_API_POOL_SIZE = 8: the API's connections, apart from the sweeper's pool.
-- [not measured] QUEEN_API_REQUEST_TIMEOUT_MS = 15000: a request's deadline; above two statement timeouts plus grace.
-- [not measured] QUEEN_API_HEADER_READ_TIMEOUT_MS = 5000: a connection's request headers; one round trip even on a slow link.
-- [not measured] QUEEN_API_BODY_READ_TIMEOUT_MS = 10000: a request body, read before it takes a slot; 4 MiB at 4 Mbit/s.
-- [measured 2026-12-07] QUEEN_API_IDEMPOTENCY_WINDOW_S = 3600
--   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (Debian 15.18-0+deb12u1) (shared_buffers=128MB, synchronous_commit=on, fsync=on, max_connections=300), local; 3 brokers, a backlog of 100000 timers, 500 timers/s, 512 B payloads, every call keyed and retried every 100 ms until answered, the server crashed mid-load
--   commit:   99425d9
--   symptom:  a key that expires before its call's retry: a schedule whose reply was lost (its work committed) is scheduled again and fires twice; against it: a long window keeps a key per call for the whole window: the table, and the schedule call that reads and trims it, grow; against it: the key table's size, which the operator provisions
--   observed: 3 runs per value. (1) the longest a keyed call's outcome stayed unknown (s): a failed call's first send to its retry's answer, or the crash to /healthz ready again, whichever is longer; the server crashed under 100 keyed calls/s (safe within 1× the value + 0), median [min–max] per value: 1: 1.2 [1.2–1.5]; 10: 1.2 [1.2–1.2]; 60: 1.2 [1.2–1.2]; 600: 1.2 [1.2–1.2]; 3600: 1.2 [1.1–1.2]; 14400: 1.2 [1.2–1.2]. Edge 10, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the edge 10 overlaps its neighbour 1 (ranges (1.2, 1.2) and (1.2, 1.5)). (2) keyed schedule p99 (ms), the key table holding a full window of 100 keyed calls/s (safe within 2× of the least), median [min–max] per value: 1: 14.0 [11.3–16.6]; 10: 14.1 [11.2–16.4]; 60: 15.6 [9.1–23.2]; 600: 13.8 [11.3–15.3]; 3600: 12.6 [9.6–15.4]; 14400: 24.7 [12.0–72.2]. Edge 14400, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom). FLAGGED: the symptom did not appear at 14400, the sweep's end: the edge is there or beyond. (3) queen.api_idempotency bytes at the end (MiB: heap, indexes, TOAST) (recorded, not judged), median [min–max] per value: 1: 1.8 [1.8–1.8]; 10: 3.1 [3.1–3.1]; 60: 10.0 [10.0–10.0]; 600: 85.2 [85.1–85.2]; 3600: 503 [503–503]; 14400: 2005 [2005–2005].
--   decision: 3600, by the rule at the top of 001_log_schema.sql (shipped was 3600): the edge 10 is not resolved: one step beyond it; the value in force lies beyond it and is safe on every side.
--
-- Files in sql/ are applied in lexical order, every time a broker boots, in one transaction, so
-- everything here is idempotent: IF NOT EXISTS for objects, CREATE OR REPLACE for functions, and
-- ALTER ... SET for storage options so that a changed number reaches an existing table.

CREATE SCHEMA IF NOT EXISTS queen;

-- A queue belongs to one tenant; the same name under two tenants is two queues.
CREATE TABLE IF NOT EXISTS queen.queues (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id   text        NOT NULL,
    name        text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queues_tenant_name_key UNIQUE (tenant_id, name),
    CONSTRAINT queues_name_not_empty CHECK (name <> '' AND tenant_id <> '')
);

-- The partition row is the per-partition push serializer: every append locks it and takes the
-- offsets after the partition's last (queen.log_last_offset_v1: its newest message's, or
-- last_offset when higher). Offsets of a partition are therefore 0..N-1, dense, each exactly once,
-- whatever mix of pushes and fires produced them. last_offset is a floor, not a counter: an append
-- does not write it (a version per append, kept by any held snapshot; see 002_log_push.sql), and
-- whoever removes a partition's newest messages must raise it first.
CREATE TABLE IF NOT EXISTS queen.log_partitions (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_id    bigint      NOT NULL REFERENCES queen.queues (id),
    name        text        NOT NULL,
    last_offset bigint      NOT NULL DEFAULT -1,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT log_partitions_queue_name_key UNIQUE (queue_id, name),
    CONSTRAINT log_partitions_name_not_empty CHECK (name <> '')
);

-- The log. created_at is the later of the writer's logical now (p_now) and the instant the row was
-- written, so fire lateness measured as created_at - deliver_at includes the time a fire spent
-- waiting for partition locks, and is never negative when a test time-travels p_now forward.
CREATE TABLE IF NOT EXISTS queen.log_messages (
    partition_id bigint      NOT NULL REFERENCES queen.log_partitions (id),
    "offset"     bigint      NOT NULL,
    message_id   uuid        NOT NULL,
    txn          text        NOT NULL,
    payload      bytea       NOT NULL,
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (partition_id, "offset")
);
