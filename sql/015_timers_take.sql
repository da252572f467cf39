-- Queen: TAKE. The cycle's fire, version 2: due rows are picked, appended into the log and
-- deleted in one statement and one transaction. No lease is written and no token re-checked: the
-- rows never outlive the transaction that locked them, so a broker that dies mid-take delays
-- nothing (its transaction aborts and the rows are due at once), and exactly once is the row
-- lock's and the delete's, inside one commit.
--
-- Selection is the claim's (queen.log_timers_pick_v1: the fairness round, the shard rounds in the
-- caller's order, the per-tenant cap, FOR UPDATE SKIP LOCKED), bounded by p_max_rows and by
-- p_max_bytes (QUEEN_SWEEPER_MAX_FIRE_BYTES): it stops before the row that would cross the cap,
-- and a single row over the cap goes alone.
--
-- Locks, in the documented order: timer rows (SKIP LOCKED, never waits), then provisioning
-- (queues, then partitions, in destination order), then every partition of the take FOR UPDATE in
-- ascending id. The partition locks are the only waits, and they are taken in one global order,
-- the fire's and the push's.
--
-- Within a partition the messages are written in the rows' visibility order (then key order).
-- Returns one row per destination: how many timers it fired, the offset of its first message,
-- each timer's lateness at the take (ms, in write order), and the tenant the fairness round ended
-- at (the same on every row; NULL without a round).
--
-- p_skip_held_partitions (the sweeper's own takes while its bulk lane runs beside them, see
-- sweeper/src/drain/mod.rs): the partitions are locked FOR UPDATE SKIP LOCKED instead, and only
-- the rows bound for partitions this take locked are fired; the others stay due (their row locks
-- end with this transaction, as the rows a byte cap leaves out do). A take that would otherwise
-- queue behind a big take on a big tenant's partitions fires the other tenants' rows at once.
--
-- p_due_ms_ago (the sweeper's bulk takes): only rows due at least this long before p_now are
-- picked; lateness is still counted from p_now. The bulk lane passes the time since its pass's
-- first take, so it drains the backlog that pass found and leaves every row that fell due since
-- (a small tenant's fresh timer) to the pass's own small takes.
--
-- p_due_within_ms (the sweeper's own takes while its bulk lane runs; NULL: every due row): only
-- rows due less than this long before p_now, read from that instant on as from a head floor, so
-- the take never walks the backlog the bulk lane is draining, and its fairness gate counts only
-- what fell due since.
-- The signatures without the head floors (p_floors: the probe's, see 011_timers_probe_claim.sql)
-- and without p_skip_held_partitions, p_due_ms_ago and p_due_within_ms.
DROP FUNCTION IF EXISTS queen.log_timers_take_v1(integer[], timestamptz, integer, integer, integer, text, bigint, integer);
DROP FUNCTION IF EXISTS queen.log_timers_take_v1(integer[], timestamptz, integer, integer, integer, text, bigint, integer, bigint[]);
DROP FUNCTION IF EXISTS queen.log_timers_take_v1(integer[], timestamptz, integer, integer, integer, text, bigint, integer, bigint[], boolean);
DROP FUNCTION IF EXISTS queen.log_timers_take_v1(integer[], timestamptz, integer, integer, integer, text, bigint, integer, bigint[], boolean, integer);

CREATE OR REPLACE FUNCTION queen.log_timers_take_v1(
    p_shards integer[],
    p_now timestamptz,
    p_max_rows integer,
    p_per_tenant integer,
    p_fair_tenants integer,
    p_fair_after text,
    p_max_bytes bigint,
    p_row_overhead integer,
    p_floors bigint[] DEFAULT NULL,
    p_skip_held_partitions boolean DEFAULT false,
    p_due_ms_ago integer DEFAULT 0,
    p_due_within_ms integer DEFAULT NULL
) RETURNS TABLE (
    tenant_id text,
    queue text,
    partition text,
    timers integer,
    first_offset bigint,
    late_ms bigint[],
    fair_next text
)
LANGUAGE plpgsql
SET enable_seqscan = off  -- see queen.log_append_v1: no plan cached on a small table may scan a big one
-- Generic plans are kept (planning each call cost 1.5 ms of a 10.4 ms take, 2026-12-04): every
-- statement below reaches log_timers by address, in a query of its own, so no cached plan can
-- walk the backlog instead (sweeper/tests/plans_pg.rs counts the rows each call reads).
SET jit = off  -- see queen.log_append_v1: JIT costs far more than it saves here
AS $$
#variable_conflict use_column
DECLARE
    v_ctids tid[];
    v_fair_next text;
    v_dest_tenants text[];
    v_dest_queues text[];
    v_dest_partitions text[];
    v_dest_ids bigint[];
    v_locked bigint[];
    v_floors bigint[] := p_floors;
    v_since bigint;
    v_dest record;
BEGIN
    IF p_max_bytes IS NULL THEN
        RAISE EXCEPTION 'log_timers_take_v1: max_bytes must be given' USING ERRCODE = '22023';
    END IF;
    IF p_due_ms_ago IS NULL OR p_due_ms_ago < 0 OR p_due_within_ms < 0 THEN
        RAISE EXCEPTION 'log_timers_take_v1: due_ms_ago must be >= 0 and due_within_ms NULL or >= 0 (got %, %)',
            p_due_ms_ago, p_due_within_ms USING ERRCODE = '22023';
    END IF;
    IF p_due_within_ms IS NOT NULL THEN
        v_since := floor(extract(epoch FROM p_now) * 1000)::bigint - p_due_within_ms;
        v_floors := ARRAY(SELECT greatest(coalesce(p_floors[s + 1], v_since), v_since)
                          FROM generate_series(0, 63) AS s);
    END IF;
    SELECT array_agg(p.row_id), max(p.fair_next) INTO v_ctids, v_fair_next
    FROM queen.log_timers_pick_v1('log_timers_take_v1', p_shards,
                                  p_now - make_interval(secs => p_due_ms_ago / 1000.0), p_max_rows, p_per_tenant,
                                  p_fair_tenants, p_fair_after, p_max_bytes, p_row_overhead, v_floors) AS p;
    IF v_ctids IS NULL THEN
        RETURN;
    END IF;

    -- The destinations, in destination order, with the partitions that already exist.
    SELECT array_agg(d.tenant_id ORDER BY d.tenant_id, d.queue, d.partition),
           array_agg(d.queue ORDER BY d.tenant_id, d.queue, d.partition),
           array_agg(d.partition ORDER BY d.tenant_id, d.queue, d.partition),
           array_agg(lp.id ORDER BY d.tenant_id, d.queue, d.partition)
    INTO v_dest_tenants, v_dest_queues, v_dest_partitions, v_dest_ids
    FROM (SELECT DISTINCT t.tenant_id, t.queue, t.partition
          -- The rows are read by address in a query of their own (MATERIALIZED): flattened into
          -- the DISTINCT, the planner may prefer a walk of the primary key in destination order,
          -- filtered on ctid (every pending row of the queue: 478 ms per 200-row take with
          -- 200 000 pending, on a plan made while the table was small, 2026-12-04).
          FROM (WITH held AS MATERIALIZED (
                    SELECT h.tenant_id, h.queue, h.partition
                    FROM queen.log_timers h WHERE h.ctid = ANY (v_ctids))
                SELECT * FROM held) AS t) AS d
    LEFT JOIN queen.queues q ON q.tenant_id = d.tenant_id AND q.name = d.queue
    LEFT JOIN queen.log_partitions lp ON lp.queue_id = q.id AND lp.name = d.partition;
    -- Provision the missing ones one by one, in destination order (one global order for every
    -- concurrent take and fire); then lock every partition of the take in ascending id.
    FOR v_dest IN
        SELECT d.i, d.tenant, d.queue, d.partition
        FROM unnest(v_dest_tenants, v_dest_queues, v_dest_partitions, v_dest_ids)
             WITH ORDINALITY AS d(tenant, queue, partition, id, i)
        WHERE d.id IS NULL
        ORDER BY d.i
    LOOP
        v_dest_ids[v_dest.i] := queen.log_partition_ensure_v1(v_dest.tenant, v_dest.queue, v_dest.partition);
    END LOOP;
    IF NOT coalesce(p_skip_held_partitions, false) THEN
        PERFORM 1 FROM queen.log_partitions p WHERE p.id = ANY (v_dest_ids) ORDER BY p.id FOR UPDATE;
    ELSE
        SELECT coalesce(array_agg(l.id), '{}') INTO v_locked
        FROM (SELECT p.id FROM queen.log_partitions p
              WHERE p.id = ANY (v_dest_ids) ORDER BY p.id FOR UPDATE SKIP LOCKED) AS l;
        IF cardinality(v_locked) < cardinality(v_dest_ids) THEN
            -- Only the destinations this take holds, and only the rows bound for them (read by
            -- address first, as below).
            SELECT array_agg(d.tenant ORDER BY d.i), array_agg(d.queue ORDER BY d.i),
                   array_agg(d.partition ORDER BY d.i), array_agg(d.id ORDER BY d.i)
            INTO v_dest_tenants, v_dest_queues, v_dest_partitions, v_dest_ids
            FROM unnest(v_dest_tenants, v_dest_queues, v_dest_partitions, v_dest_ids)
                 WITH ORDINALITY AS d(tenant, queue, partition, id, i)
            WHERE d.id = ANY (v_locked);
            IF v_dest_ids IS NULL THEN
                RETURN;
            END IF;
            WITH held AS MATERIALIZED (
                SELECT h.ctid AS row_id, h.tenant_id, h.queue, h.partition
                FROM queen.log_timers h WHERE h.ctid = ANY (v_ctids))
            SELECT array_agg(x.row_id) INTO v_ctids
            FROM held x
            JOIN unnest(v_dest_tenants, v_dest_queues, v_dest_partitions) AS d(tenant, queue, partition)
              ON d.tenant = x.tenant_id AND d.queue = x.queue AND d.partition = x.partition;
        END IF;
    END IF;

    -- (A data-modifying WITH runs to completion whether or not the outer query reads it.)
    -- Every destination in one statement: each takes the next offsets of its partition and writes
    -- its messages; the timer rows go in the same statement, by address.
    RETURN QUERY
    -- The rows are read by address first, in a query of their own (MATERIALIZED), then matched
    -- to their destinations: joined in one query, a plan made on statistics from before the
    -- backlog looked each destination up by the primary key's (tenant_id, queue) prefix and
    -- filtered every pending row of the queue on ctid (918-925 ms per 200-row take with 200 000
    -- pending in one queue, 2026-12-04).
    WITH held AS MATERIALIZED (
        SELECT t.ctid AS row_id, t.tenant_id, t.queue, t.partition, t.timer_key, t.visible_at,
               t.deliver_at, t.message_id, t.txn, t.payload
        FROM queen.log_timers t
        WHERE t.ctid = ANY (v_ctids)
    ), taken AS (
        SELECT h.*, d.partition_id
        FROM held h
        JOIN unnest(v_dest_tenants, v_dest_queues, v_dest_partitions, v_dest_ids)
             AS d(tenant, queue, partition, partition_id)
          ON d.tenant = h.tenant_id AND d.queue = h.queue AND d.partition = h.partition
    ), numbered AS (
        SELECT x.*, row_number() OVER (PARTITION BY x.partition_id ORDER BY x.visible_at, x.timer_key) AS n
        FROM taken x
    ), based AS (
        -- Each partition's offsets continue its log (queen.log_last_offset_v1; its row is locked).
        SELECT c.partition_id AS id, queen.log_last_offset_v1(c.partition_id) AS base
        FROM (SELECT DISTINCT partition_id FROM numbered) AS c
    ), written AS (
        INSERT INTO queen.log_messages (partition_id, "offset", message_id, txn, payload, created_at)
        SELECT n.partition_id, b.base + n.n, n.message_id, n.txn, n.payload,
               greatest(p_now, clock_timestamp())
        FROM numbered n JOIN based b ON b.id = n.partition_id
    ), deleted AS (
        DELETE FROM queen.log_timers t WHERE t.ctid = ANY (v_ctids)
    )
    SELECT n.tenant_id, n.queue, n.partition, count(*)::integer, (min(b.base) + 1)::bigint,
           array_agg(greatest(0, floor(extract(epoch FROM p_now - n.deliver_at) * 1000))::bigint ORDER BY n.n),
           v_fair_next
    FROM numbered n JOIN based b ON b.id = n.partition_id
    GROUP BY n.tenant_id, n.queue, n.partition
    ORDER BY n.tenant_id, n.queue, n.partition;
END;
$$;
