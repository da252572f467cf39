-- Queen: FIRE. Moves claimed timers into the log, exactly once.
--
-- The call carries segments: a segment is the claimed timers of one destination
-- (tenant, queue, partition), in claim order. Segment i owns p_seg_sizes[i] consecutive entries
-- of p_timer_keys / p_tokens. Per segment the answer is
--   fired  every row of the segment was still held with this caller's token: its messages are in
--          the log (the timer's message_id, txn and payload), its timer rows are gone;
--   stale  at least one row was not (re-claimed by another broker after the lease, cancelled,
--          rescheduled, already fired, or locked by someone else for longer than the fire polls
--          for it): nothing of the segment is written, and the rows this caller still held are
--          released at once, so they are claimable immediately rather than after the lease.
-- A segment is all-or-nothing so that a destination never receives a partial, reordered batch.
--
-- Locks: timer rows FOR UPDATE SKIP LOCKED (a fire never waits on a timer row: a row somebody
-- else has locked is simply not held by us), then provisioning (queues, then partitions, in
-- destination order), then the partitions of the live segments FOR UPDATE in ascending id. The
-- partition locks are the only waits, and they are taken in one global order.
--
-- The token is the proof of ownership. A row still carrying this caller's token after its lease
-- ended was not re-claimed by anyone (a claim replaces the token), and the row lock taken here
-- keeps it that way until commit, so firing it is still exactly once.
-- The segments of a fire call: 0-based number, how many positions precede it, its size.
CREATE OR REPLACE FUNCTION queen.fire_segments_v1(p_seg_sizes integer[])
RETURNS TABLE (seg integer, start integer, n integer)
LANGUAGE sql IMMUTABLE AS $$
    SELECT (s.i - 1)::integer, (sum(s.n) OVER (ORDER BY s.i) - s.n)::integer, s.n
    FROM unnest(p_seg_sizes) WITH ORDINALITY AS s(n, i)
$$;

-- Every position of a fire call (1-based, aligned with its key and token arrays) with the
-- segment, tenant and queue it belongs to.
CREATE OR REPLACE FUNCTION queen.fire_rows_v1(p_seg_tenants text[], p_seg_queues text[], p_seg_sizes integer[])
RETURNS TABLE (pos integer, seg integer, tenant text, queue text)
LANGUAGE sql IMMUTABLE AS $$
    SELECT g.pos, s.seg, p_seg_tenants[s.seg + 1], p_seg_queues[s.seg + 1]
    FROM queen.fire_segments_v1(p_seg_sizes) AS s
    CROSS JOIN LATERAL generate_series(s.start + 1, s.start + s.n) AS g(pos)
$$;

-- The positions p_positions of a fire call with their full key and token as plain columns: what
-- the row probes join on. Reading the key from an array subscript inside the probe let the planner
-- seek log_timers_pkey on (tenant_id, queue) alone and filter the key afterwards: with 20 000
-- rows in one queue a 200-row fire read 158 400 rows and took about 1 s.
CREATE OR REPLACE FUNCTION queen.fire_keys_v1(
    p_seg_tenants text[], p_seg_queues text[], p_seg_sizes integer[],
    p_timer_keys text[], p_tokens uuid[], p_positions integer[]
) RETURNS TABLE (pos integer, tenant text, queue text, timer_key text, token uuid)
LANGUAGE sql IMMUTABLE AS $$
    SELECT r.pos, r.tenant, r.queue, k.timer_key, k.token
    FROM queen.fire_rows_v1(p_seg_tenants, p_seg_queues, p_seg_sizes) AS r
    JOIN unnest(p_timer_keys, p_tokens) WITH ORDINALITY AS k(timer_key, token, pos) ON k.pos = r.pos
    WHERE r.pos = ANY (p_positions)
$$;

CREATE OR REPLACE FUNCTION queen.log_timers_fire_v1(
    p_seg_tenants text[],
    p_seg_queues text[],
    p_seg_partitions text[],
    p_seg_sizes integer[],
    p_timer_keys text[],
    p_tokens uuid[],
    p_now timestamptz
) RETURNS TABLE (segment integer, result text, timers integer, first_offset bigint)
LANGUAGE plpgsql
SET enable_seqscan = off  -- see queen.log_append_v1: no plan cached on a small table may scan a big one
SET plan_cache_mode = force_custom_plan  -- see queen.log_timers_claim_v1: one plan per call, made for its rows
SET jit = off  -- see queen.log_append_v1: JIT costs far more than it saves here
AS $$
#variable_conflict use_column
DECLARE
    v_segments integer := coalesce(cardinality(p_seg_sizes), 0);
    v_rows integer := coalesce(cardinality(p_timer_keys), 0);
    -- Per position (1-based, aligned with p_timer_keys): the row's address when this call holds
    -- it (NULL when it does not), and what its message will carry.
    v_row_ids tid[];
    v_message_ids uuid[];
    v_txns text[];
    v_payloads bytea[];
    v_live integer[] := '{}';     -- 0-based segment numbers whose rows are all held
    v_fired_rows tid[] := '{}';
    v_partition_ids bigint[] := '{}';
    v_partition_of bigint[];      -- partition id per segment (index = segment + 1)
    v_seg record;
    v_held record;
    v_wanted integer[];
    v_attempt integer;
    -- Polls for a row that is ours but locked this instant: 1+2+4+8+16+32 ms at most. Not measured.
    c_busy_retries constant integer := 6;
BEGIN
    -- Guard the shape of the call before touching anything.
    IF p_now IS NULL THEN
        RAISE EXCEPTION 'log_timers_fire_v1: now must be given' USING ERRCODE = '22023';
    END IF;
    IF cardinality(p_seg_tenants) IS DISTINCT FROM v_segments
       OR cardinality(p_seg_queues) IS DISTINCT FROM v_segments
       OR cardinality(p_seg_partitions) IS DISTINCT FROM v_segments
       OR cardinality(p_tokens) IS DISTINCT FROM v_rows THEN
        RAISE EXCEPTION 'log_timers_fire_v1: misaligned arrays (segments: tenants %, queues %, partitions %, sizes %; rows: keys %, tokens %)',
            cardinality(p_seg_tenants), cardinality(p_seg_queues), cardinality(p_seg_partitions),
            v_segments, v_rows, cardinality(p_tokens)
            USING ERRCODE = '22023';
    END IF;
    IF v_segments = 0 THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_seg_sizes) AS n WHERE n IS NULL OR n < 1)
       OR (SELECT sum(n) FROM unnest(p_seg_sizes) AS n) <> v_rows THEN
        RAISE EXCEPTION 'log_timers_fire_v1: segment sizes % must be >= 1 and sum to the % rows given',
            p_seg_sizes, v_rows USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_timer_keys, p_tokens) AS k(key, token) WHERE k.key IS NULL OR k.token IS NULL) THEN
        RAISE EXCEPTION 'log_timers_fire_v1: timer keys and tokens must not be NULL' USING ERRCODE = '22023';
    END IF;
    -- Counted by hashing the distinct rows: count(DISTINCT (a, b, c)) sorts records, twice as slow
    -- (1.25 against 0.6 ms for 200 timers).
    IF (SELECT count(*) FROM (SELECT DISTINCT d.t, d.q, d.p
                              FROM unnest(p_seg_tenants, p_seg_queues, p_seg_partitions) AS d(t, q, p)) AS u)
       <> v_segments THEN
        RAISE EXCEPTION 'log_timers_fire_v1: two segments name the same destination (tenant, queue, partition); a destination must be one segment per call'
            USING ERRCODE = '22023';
    END IF;
    IF (SELECT count(*) FROM (SELECT DISTINCT r.tenant, r.queue, p_timer_keys[r.pos]
                              FROM queen.fire_rows_v1(p_seg_tenants, p_seg_queues, p_seg_sizes) AS r) AS u)
       <> v_rows THEN
        RAISE EXCEPTION 'log_timers_fire_v1: a timer appears twice in one call'
            USING ERRCODE = '22023';
    END IF;

    -- Lock the rows still held with our token, one primary-key probe each (all three key columns
    -- and the token as plain columns of the probe's outer side, so the probe is a single-row
    -- index seek whatever the destination's backlog); skip any row another transaction has
    -- locked (a fire never waits on a timer row).
    v_row_ids := array_fill(NULL::tid, ARRAY[v_rows]);
    v_message_ids := array_fill(NULL::uuid, ARRAY[v_rows]);
    v_txns := array_fill(NULL::text, ARRAY[v_rows]);
    v_payloads := array_fill(NULL::bytea, ARRAY[v_rows]);
    v_wanted := ARRAY(SELECT generate_series(1, v_rows));
    FOR v_attempt IN 0 .. c_busy_retries LOOP
        IF v_attempt > 0 THEN
            -- Still ours, but locked by somebody this instant: almost always a concurrent claim
            -- whose index scan raced ours, rechecked the row under a lock and keeps that lock
            -- until its own transaction ends, milliseconds later. Poll for it briefly instead of
            -- calling the segment stale, which would strand the row until its lease ran out.
            -- Polling is not waiting: this fire never queues on a timer row lock.
            PERFORM pg_sleep(0.001 * (1 << (v_attempt - 1)));
        END IF;
        FOR v_held IN
            SELECT r.pos, h.row_id, h.message_id, h.txn, h.payload
            FROM queen.fire_keys_v1(p_seg_tenants, p_seg_queues, p_seg_sizes, p_timer_keys, p_tokens, v_wanted) AS r
            CROSS JOIN LATERAL (
                SELECT t.ctid AS row_id, t.message_id, t.txn, t.payload
                FROM queen.log_timers t
                WHERE t.tenant_id = r.tenant AND t.queue = r.queue AND t.timer_key = r.timer_key
                  AND t.claim_token = r.token
                FOR UPDATE OF t SKIP LOCKED
            ) AS h
        LOOP
            v_row_ids[v_held.pos] := v_held.row_id;
            v_message_ids[v_held.pos] := v_held.message_id;
            v_txns[v_held.pos] := v_held.txn;
            v_payloads[v_held.pos] := v_held.payload;
        END LOOP;
        -- Positions not held: in the common case none, and the table is not read again. Of the
        -- others, those still carrying our token in a plain read are locked by another: wanted.
        v_wanted := ARRAY(SELECT p FROM generate_series(1, v_rows) AS p WHERE v_row_ids[p] IS NULL);
        EXIT WHEN cardinality(v_wanted) = 0;
        v_wanted := ARRAY(
            SELECT r.pos
            FROM queen.fire_keys_v1(p_seg_tenants, p_seg_queues, p_seg_sizes, p_timer_keys, p_tokens, v_wanted) AS r
            WHERE EXISTS (SELECT 1 FROM queen.log_timers t
                          WHERE t.tenant_id = r.tenant AND t.queue = r.queue
                            AND t.timer_key = r.timer_key AND t.claim_token = r.token));
        EXIT WHEN cardinality(v_wanted) = 0;
    END LOOP;

    FOR v_seg IN
        SELECT s.seg, s.start, s.n FROM queen.fire_segments_v1(p_seg_sizes) AS s ORDER BY s.seg
    LOOP
        IF array_position(v_row_ids[v_seg.start + 1 : v_seg.start + v_seg.n], NULL) IS NULL THEN
            v_live := v_live || v_seg.seg;
        ELSE
            -- Stale: give back what we still hold of it, visible at once (from p_now, not from
            -- deliver_at: no write makes a row visible before its own now, see 010).
            UPDATE queen.log_timers t
            SET claim_token = NULL, claimed_until = p_now
            WHERE t.ctid = ANY (v_row_ids[v_seg.start + 1 : v_seg.start + v_seg.n]);
            segment := v_seg.seg; result := 'stale'; timers := v_seg.n; first_offset := NULL;
            RETURN NEXT;
        END IF;
    END LOOP;

    IF cardinality(v_live) = 0 THEN
        RETURN;
    END IF;

    -- Look every destination up at once; provision the missing ones one by one, in destination
    -- order (one global order for every concurrent fire); then lock every partition of the call
    -- in ascending id before the first append.
    SELECT array_agg(lp.id ORDER BY s.i) INTO v_partition_of
    FROM unnest(p_seg_tenants, p_seg_queues, p_seg_partitions) WITH ORDINALITY AS s(tenant, queue, partition, i)
    LEFT JOIN queen.queues q ON q.tenant_id = s.tenant AND q.name = s.queue
    LEFT JOIN queen.log_partitions lp ON lp.queue_id = q.id AND lp.name = s.partition;
    FOR v_seg IN
        SELECT (s.i - 1)::integer AS seg, s.tenant, s.queue, s.partition
        FROM unnest(p_seg_tenants, p_seg_queues, p_seg_partitions) WITH ORDINALITY AS s(tenant, queue, partition, i)
        WHERE (s.i - 1) = ANY (v_live) AND v_partition_of[s.i] IS NULL
        ORDER BY s.tenant, s.queue, s.partition
    LOOP
        v_partition_of[v_seg.seg + 1] :=
            queen.log_partition_ensure_v1(v_seg.tenant, v_seg.queue, v_seg.partition);
    END LOOP;
    SELECT array_agg(v_partition_of[seg + 1]) INTO v_partition_ids FROM unnest(v_live) AS seg;
    PERFORM 1 FROM queen.log_partitions p WHERE p.id = ANY (v_partition_ids) ORDER BY p.id FOR UPDATE;

    -- (A data-modifying WITH runs to completion whether or not the outer query reads it.)
    -- Every live segment in one statement: each takes the next offsets of its partition (one
    -- segment per partition: destinations are distinct) and writes its messages in claim order.
    -- The same allocation as queen.log_append_v1, set-based: a loop of one append per segment
    -- cost 9 ms for 200 timers on 96 destinations, this about a third of it.
    RETURN QUERY
    WITH live_rows AS (
        SELECT r.pos, r.seg, v_partition_of[r.seg + 1] AS partition_id
        FROM queen.fire_rows_v1(p_seg_tenants, p_seg_queues, p_seg_sizes) AS r
        WHERE r.seg = ANY (v_live)
    ), numbered AS (
        SELECT l.*, row_number() OVER (PARTITION BY l.partition_id ORDER BY l.pos) AS n
        FROM live_rows l
    ), based AS (
        -- Each partition's offsets continue its log (queen.log_last_offset_v1; its row is locked).
        SELECT c.partition_id AS id, queen.log_last_offset_v1(c.partition_id) AS base
        FROM (SELECT DISTINCT partition_id FROM numbered) AS c
    ), written AS (
        INSERT INTO queen.log_messages (partition_id, "offset", message_id, txn, payload, created_at)
        SELECT n.partition_id, b.base + n.n, v_message_ids[n.pos], v_txns[n.pos], v_payloads[n.pos],
               greatest(p_now, clock_timestamp())
        FROM numbered n JOIN based b ON b.id = n.partition_id
    )
    SELECT n.seg, 'fired'::text, count(*)::integer, (min(b.base) + 1)::bigint
    FROM numbered n JOIN based b ON b.id = n.partition_id
    GROUP BY n.seg
    ORDER BY n.seg;

    SELECT array_agg(v_row_ids[r.pos]) INTO v_fired_rows
    FROM queen.fire_rows_v1(p_seg_tenants, p_seg_queues, p_seg_sizes) AS r
    WHERE r.seg = ANY (v_live);
    DELETE FROM queen.log_timers t WHERE t.ctid = ANY (v_fired_rows);
END;
$$;
