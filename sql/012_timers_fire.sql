-- Queen: FIRE. Moves claimed timers into the log, exactly once.
--
-- The call carries segments: a segment is the claimed timers of one destination
-- (tenant, queue, partition), in claim order. Segment i owns p_seg_sizes[i] consecutive entries
-- of p_timer_keys / p_tokens. Per segment the answer is
--   fired  every row of the segment was still held with this caller's token: its messages are in
--          the log (the timer's message_id, txn and payload), its timer rows are gone;
--   stale  at least one row was not (re-claimed by another broker after the lease, cancelled,
--          rescheduled, already fired, or locked by someone else this instant): nothing of the
--          segment is written, and the rows this caller still held are released at once, so
--          they are claimable immediately rather than after the lease.
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
CREATE OR REPLACE FUNCTION queen.log_timers_fire_v1(
    p_seg_tenants text[],
    p_seg_queues text[],
    p_seg_partitions text[],
    p_seg_sizes integer[],
    p_timer_keys text[],
    p_tokens uuid[],
    p_now timestamptz
) RETURNS TABLE (segment integer, result text, timers integer, first_offset bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_segments integer := coalesce(cardinality(p_seg_sizes), 0);
    v_rows integer := coalesce(cardinality(p_timer_keys), 0);
    v_held integer[];          -- positions (1-based, into p_timer_keys) this call holds
    v_live integer[] := '{}';  -- 0-based segment numbers whose rows are all held
    v_partition_ids bigint[] := '{}';
    v_partition_of bigint[];   -- partition id per segment (index = segment + 1), once provisioned
    v_seg record;
    v_first bigint;
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
    IF (SELECT count(DISTINCT (t, q, p)) FROM unnest(p_seg_tenants, p_seg_queues, p_seg_partitions) AS d(t, q, p))
       <> v_segments THEN
        RAISE EXCEPTION 'log_timers_fire_v1: two segments name the same destination (tenant, queue, partition); a destination must be one segment per call'
            USING ERRCODE = '22023';
    END IF;
    IF (SELECT count(DISTINCT (g.tenant, g.queue, k.key))
        FROM unnest(p_timer_keys) WITH ORDINALITY AS k(key, pos)
        JOIN (SELECT s.tenant, s.queue, sum(s.n) OVER (ORDER BY s.i) - s.n AS start, s.n
              FROM unnest(p_seg_tenants, p_seg_queues, p_seg_sizes) WITH ORDINALITY AS s(tenant, queue, n, i)) g
          ON k.pos > g.start AND k.pos <= g.start + g.n) <> v_rows THEN
        RAISE EXCEPTION 'log_timers_fire_v1: a timer appears twice in one call'
            USING ERRCODE = '22023';
    END IF;

    -- Rows with their segment. Lock the ones still held with our token; skip any locked by others.
    v_held := ARRAY(
        WITH segs AS (
            SELECT (s.i - 1)::integer AS seg, s.tenant, s.queue,
                   (sum(s.n) OVER (ORDER BY s.i) - s.n)::integer AS start, s.n
            FROM unnest(p_seg_tenants, p_seg_queues, p_seg_sizes) WITH ORDINALITY AS s(tenant, queue, n, i)
        ), wanted AS (
            SELECT k.pos::integer AS pos, g.tenant, g.queue, k.key, k.token
            FROM unnest(p_timer_keys, p_tokens) WITH ORDINALITY AS k(key, token, pos)
            JOIN segs g ON k.pos > g.start AND k.pos <= g.start + g.n
        )
        SELECT w.pos
        FROM queen.log_timers t
        JOIN wanted w ON t.tenant_id = w.tenant AND t.queue = w.queue AND t.timer_key = w.key
        WHERE t.claim_token = w.token
        FOR UPDATE OF t SKIP LOCKED
    );

    FOR v_seg IN
        SELECT (s.i - 1)::integer AS seg, s.tenant, s.queue, s.partition, s.n,
               (sum(s.n) OVER (ORDER BY s.i) - s.n)::integer AS start
        FROM unnest(p_seg_tenants, p_seg_queues, p_seg_partitions, p_seg_sizes)
             WITH ORDINALITY AS s(tenant, queue, partition, n, i)
        ORDER BY s.i
    LOOP
        IF (SELECT count(*) FROM unnest(v_held) AS h
            WHERE h > v_seg.start AND h <= v_seg.start + v_seg.n) = v_seg.n THEN
            v_live := v_live || v_seg.seg;
        ELSE
            -- Stale: give back what we still hold of it, visible at once.
            UPDATE queen.log_timers t
            SET claim_token = NULL, claimed_until = NULL
            FROM unnest(p_timer_keys, p_tokens) WITH ORDINALITY AS k(key, token, pos)
            WHERE k.pos > v_seg.start AND k.pos <= v_seg.start + v_seg.n
              AND k.pos = ANY (v_held)
              AND t.tenant_id = v_seg.tenant AND t.queue = v_seg.queue AND t.timer_key = k.key;
            segment := v_seg.seg; result := 'stale'; timers := v_seg.n; first_offset := NULL;
            RETURN NEXT;
        END IF;
    END LOOP;

    IF cardinality(v_live) = 0 THEN
        RETURN;
    END IF;

    -- Provision in destination order (one global order for every concurrent fire), then lock
    -- every partition of the call in ascending id before the first append.
    v_partition_of := array_fill(NULL::bigint, ARRAY[v_segments]);
    FOR v_seg IN
        SELECT (s.i - 1)::integer AS seg, s.tenant, s.queue, s.partition
        FROM unnest(p_seg_tenants, p_seg_queues, p_seg_partitions) WITH ORDINALITY AS s(tenant, queue, partition, i)
        WHERE (s.i - 1) = ANY (v_live)
        ORDER BY s.tenant, s.queue, s.partition
    LOOP
        v_partition_of[v_seg.seg + 1] :=
            queen.log_partition_ensure_v1(v_seg.tenant, v_seg.queue, v_seg.partition);
        v_partition_ids := v_partition_ids || v_partition_of[v_seg.seg + 1];
    END LOOP;
    PERFORM 1 FROM queen.log_partitions p WHERE p.id = ANY (v_partition_ids) ORDER BY p.id FOR UPDATE;

    FOR v_seg IN
        SELECT (s.i - 1)::integer AS seg, s.tenant, s.queue, s.partition, s.n,
               (sum(s.n) OVER (ORDER BY s.i) - s.n)::integer AS start
        FROM unnest(p_seg_tenants, p_seg_queues, p_seg_partitions, p_seg_sizes)
             WITH ORDINALITY AS s(tenant, queue, partition, n, i)
        ORDER BY s.i
    LOOP
        CONTINUE WHEN NOT (v_seg.seg = ANY (v_live));
        SELECT queen.log_append_v1(
                   v_partition_of[v_seg.seg + 1],
                   array_agg(t.message_id ORDER BY k.pos),
                   array_agg(t.txn ORDER BY k.pos),
                   array_agg(t.payload ORDER BY k.pos),
                   p_now)
        INTO v_first
        FROM unnest(p_timer_keys) WITH ORDINALITY AS k(key, pos)
        JOIN queen.log_timers t
          ON t.tenant_id = v_seg.tenant AND t.queue = v_seg.queue AND t.timer_key = k.key
        WHERE k.pos > v_seg.start AND k.pos <= v_seg.start + v_seg.n;

        DELETE FROM queen.log_timers t
        USING unnest(p_timer_keys) WITH ORDINALITY AS k(key, pos)
        WHERE k.pos > v_seg.start AND k.pos <= v_seg.start + v_seg.n
          AND t.tenant_id = v_seg.tenant AND t.queue = v_seg.queue AND t.timer_key = k.key;

        segment := v_seg.seg; result := 'fired'; timers := v_seg.n; first_offset := v_first;
        RETURN NEXT;
    END LOOP;
END;
$$;
