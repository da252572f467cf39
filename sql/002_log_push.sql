-- Queen: provisioning and the push function. Pushes from producers and fires from the sweeper
-- both append through queen.log_append_v1, so they contend for the same partition row lock, as
-- they do in production.
--
-- Lock order (whole schema): kv -> log_timers -> queues -> log_partitions -> leaves. Provisioning
-- only ever inserts into queues and then log_partitions; an append locks exactly the partitions it
-- writes, and a caller that appends to several locks them all first, in ascending id.

-- The last offset in use in a partition: its newest message's, or last_offset when that is
-- higher (a floor: whoever removes a partition's newest messages must raise last_offset first, or
-- their offsets would be handed out again; nothing removes messages today), -1 for an empty one.
-- The caller holds the partition's row locked and calls this in a statement that began after the
-- lock was granted (READ COMMITTED), so it sees the messages of every append before it.
--
-- Why the log and not a counter on the partition row (the design until 2026-12-06): every append
-- updated the counter, and each update is a row version that no vacuum can remove while any
-- snapshot older than it is held (an idle transaction: a common operations accident), so every
-- lookup of the partition walked all of them. In the soak's snapshot case at 2630546 (500
-- timers/s, 24 partitions, 165 s in): 79 428 counter updates, about 3 800 versions a partition,
-- one primary-key lookup of a partition read 146 heap pages (1.4 ms), and a take looks each of
-- its partitions up three times. The newest entry of the messages' primary key is never dead: the
-- log is only appended to. The row lock alone writes no version.
CREATE OR REPLACE FUNCTION queen.log_last_offset_v1(p_partition_id bigint)
RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT greatest(
        (SELECT lp.last_offset FROM queen.log_partitions lp WHERE lp.id = p_partition_id),
        (SELECT m."offset" FROM queen.log_messages m
         WHERE m.partition_id = p_partition_id ORDER BY m."offset" DESC LIMIT 1),
        -1)
$$;

-- The id of (tenant, queue, partition), creating the queue and the partition if missing. The
-- common case (both exist) takes no lock at all. Concurrent creators meet on the unique indexes:
-- ON CONFLICT DO NOTHING waits for the other inserter and then finds its row.
CREATE OR REPLACE FUNCTION queen.log_partition_ensure_v1(
    p_tenant text, p_queue text, p_partition text
) RETURNS bigint
LANGUAGE plpgsql
SET enable_seqscan = off  -- see queen.log_append_v1: no plan cached on a small table may scan a big one
AS $$
DECLARE
    v_queue_id bigint;
    v_partition_id bigint;
BEGIN
    IF coalesce(p_tenant, '') = '' OR coalesce(p_queue, '') = '' OR coalesce(p_partition, '') = '' THEN
        RAISE EXCEPTION 'log_partition_ensure_v1: tenant, queue and partition must be non-empty (got %, %, %)',
            quote_nullable(p_tenant), quote_nullable(p_queue), quote_nullable(p_partition)
            USING ERRCODE = '22023';
    END IF;

    SELECT p.id INTO v_partition_id
    FROM queen.queues q JOIN queen.log_partitions p ON p.queue_id = q.id
    WHERE q.tenant_id = p_tenant AND q.name = p_queue AND p.name = p_partition;
    IF FOUND THEN
        RETURN v_partition_id;
    END IF;

    INSERT INTO queen.queues (tenant_id, name) VALUES (p_tenant, p_queue)
    ON CONFLICT (tenant_id, name) DO NOTHING;
    SELECT id INTO STRICT v_queue_id FROM queen.queues WHERE tenant_id = p_tenant AND name = p_queue;

    INSERT INTO queen.log_partitions (queue_id, name) VALUES (v_queue_id, p_partition)
    ON CONFLICT (queue_id, name) DO NOTHING;
    SELECT id INTO STRICT v_partition_id
    FROM queen.log_partitions WHERE queue_id = v_queue_id AND name = p_partition;
    RETURN v_partition_id;
END;
$$;

-- Appends n messages to one partition: locks the partition row (the offset allocator), takes the
-- next n offsets and writes the messages in array order. Returns the first offset. Arrays must be
-- aligned; the callers check, this asserts.
CREATE OR REPLACE FUNCTION queen.log_append_v1(
    p_partition_id bigint,
    p_message_ids uuid[],
    p_txns text[],
    p_payloads bytea[],
    p_now timestamptz
) RETURNS bigint
LANGUAGE plpgsql
-- enable_seqscan = off, on every function of the hot paths: each of their statements reaches
-- its rows through an index (a key, or the head of a shard), and a plan must keep doing so
-- whatever size the table had when it was made. PL/pgSQL caches a generic plan per statement and
-- session; one made while log_timers was nearly empty (a fresh deployment, a drained backlog, every
-- soak run) chose sequential scans, and the session kept it as the table grew: measured on
-- 2026-12-04 (PostgreSQL 15.18, this repository's commit add4ffd), a probe took 5 300-5 700 ms and
-- a 200-row take 660-880 ms with 200 000 pending rows in one queue, against 1-8 ms once the plans
-- were remade; a 1 000-timer schedule grew from 80 ms to 3 700 ms on one connection within one
-- 20 000-timer burst. Turning sequential scans off leaves the index plans as the only cheap ones.
SET enable_seqscan = off
-- JIT compiles for tens of milliseconds to save microseconds on these small statements
-- (measured: a 200-row fire spent 12.5 ms of 13.7 ms compiling). Never worth it here.
SET jit = off AS $$
DECLARE
    v_count int := coalesce(cardinality(p_payloads), 0);
    v_first bigint;
BEGIN
    IF cardinality(p_message_ids) IS DISTINCT FROM v_count
       OR cardinality(p_txns) IS DISTINCT FROM v_count THEN
        RAISE EXCEPTION 'log_append_v1: misaligned arrays (message_ids %, txns %, payloads %)',
            cardinality(p_message_ids), cardinality(p_txns), v_count
            USING ERRCODE = '22023';
    END IF;
    IF v_count = 0 THEN
        RETURN NULL;
    END IF;

    PERFORM 1 FROM queen.log_partitions WHERE id = p_partition_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'log_append_v1: partition % does not exist', p_partition_id
            USING ERRCODE = '22023';
    END IF;
    v_first := queen.log_last_offset_v1(p_partition_id) + 1;

    INSERT INTO queen.log_messages (partition_id, "offset", message_id, txn, payload, created_at)
    SELECT p_partition_id, v_first + m.ord - 1, m.message_id, m.txn, m.payload,
           greatest(p_now, clock_timestamp())
    FROM unnest(p_message_ids, p_txns, p_payloads) WITH ORDINALITY
         AS m(message_id, txn, payload, ord);
    RETURN v_first;
END;
$$;

-- PUSH: a producer appends payloads to (tenant, queue, partition), provisioning it if missing.
-- p_txns may be NULL (each message's txn is then its message id) or aligned with p_payloads.
-- Returns one row per message, in array order.
CREATE OR REPLACE FUNCTION queen.log_push_v1(
    p_tenant text,
    p_queue text,
    p_partition text,
    p_payloads bytea[],
    p_txns text[],
    p_now timestamptz
) RETURNS TABLE (message_id uuid, log_offset bigint)
LANGUAGE plpgsql
SET enable_seqscan = off  -- see queen.log_append_v1: no plan cached on a small table may scan a big one
SET jit = off  -- see queen.log_append_v1: JIT costs far more than it saves here
AS $$
DECLARE
    v_count int := coalesce(cardinality(p_payloads), 0);
    v_ids uuid[];
    v_txns text[];
    v_partition_id bigint;
    v_first bigint;
BEGIN
    IF p_txns IS NOT NULL AND cardinality(p_txns) <> v_count THEN
        RAISE EXCEPTION 'log_push_v1: % txns for % payloads; pass NULL or one txn per payload',
            cardinality(p_txns), v_count
            USING ERRCODE = '22023';
    END IF;
    IF v_count = 0 THEN
        RETURN;
    END IF;

    SELECT array_agg(gen_random_uuid()) INTO v_ids FROM generate_series(1, v_count);
    SELECT array_agg(coalesce(p_txns[i], v_ids[i]::text) ORDER BY i) INTO v_txns
    FROM generate_series(1, v_count) AS i;

    v_partition_id := queen.log_partition_ensure_v1(p_tenant, p_queue, p_partition);
    v_first := queen.log_append_v1(v_partition_id, v_ids, v_txns, p_payloads, p_now);

    RETURN QUERY
    SELECT v_ids[i], v_first + i - 1 FROM generate_series(1, v_count) AS i;
END;
$$;
