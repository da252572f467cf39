-- Queen: the reads of the HTTP API (sweeper/src/api/) that no other function provides: peek one
-- timer, list a queue's timers a page at a time, read fired messages of a partition from an offset.
--
-- All of them are read-only (STABLE) and take no row lock, so an operator paging through a queue
-- never waits on, or delays, a claim or a fire. A row a sweeper holds is read as it was last
-- committed, with its state named, never skipped: a read that skipped held rows would tell a
-- caller that a promised timer is gone.
--
-- The writes of the API go through the existing functions: log_timers_apply_v1 (schedule,
-- reschedule, cancel), kv_put_v2 / kv_get_v2 / kv_delete_v1, system_state_set_v1.

-- A timer's state against p_now, named as in 010_timers_schema.sql: held (in a sweeper's hands,
-- not cancellable), backoff (a failed fire waiting to retry, cancellable), due (claimable now),
-- waiting (not due yet). A held row whose lease ran out is due again.
CREATE OR REPLACE FUNCTION queen.log_timers_state_v1(
    p_claim_token uuid, p_claimed_until timestamptz, p_visible_at timestamptz, p_now timestamptz
) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN p_claimed_until > p_now AND p_claim_token IS NOT NULL THEN 'held'
        WHEN p_claimed_until > p_now THEN 'backoff'
        WHEN p_visible_at <= p_now THEN 'due'
        ELSE 'waiting'
    END
$$;

-- PEEK: one timer of (tenant, queue) with its payload, or no row.
CREATE OR REPLACE FUNCTION queen.log_timers_peek_v1(
    p_tenant text, p_queue text, p_timer_key text, p_now timestamptz
) RETURNS TABLE (
    queue text, timer_key text, partition text, deliver_at timestamptz, deliver_in_ms bigint,
    txn text, message_id uuid, attempts integer, last_error text, state text, payload bytea
)
LANGUAGE plpgsql STABLE
SET jit = off  -- see queen.log_append_v1: JIT costs far more than it saves here
AS $$
#variable_conflict use_column
BEGIN
    IF coalesce(p_tenant, '') = '' OR coalesce(p_queue, '') = '' OR coalesce(p_timer_key, '') = '' THEN
        RAISE EXCEPTION 'log_timers_peek_v1: tenant, queue and timer key must be non-empty' USING ERRCODE = '22023';
    END IF;
    IF p_now IS NULL THEN
        RAISE EXCEPTION 'log_timers_peek_v1: now must be given' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT t.queue, t.timer_key, t.partition, t.deliver_at,
           ceil(extract(epoch FROM t.deliver_at - p_now) * 1000)::bigint,
           t.txn, t.message_id, t.attempts, t.last_error,
           queen.log_timers_state_v1(t.claim_token, t.claimed_until, t.visible_at, p_now),
           t.payload
    FROM queen.log_timers t
    WHERE t.tenant_id = p_tenant AND t.queue = p_queue AND t.timer_key = p_timer_key;
END;
$$;

-- LIST: a queue's timers in timer-key order, after p_after (NULL: from the first), at most
-- p_limit of them. Keyset pagination on the primary key (tenant_id, queue, timer_key): every page
-- is one index range scan whatever its depth, where an OFFSET would re-read every earlier page.
-- Payloads stay in the database; payload_bytes says how big each is.
CREATE OR REPLACE FUNCTION queen.log_timers_list_v1(
    p_tenant text, p_queue text, p_after text, p_limit integer, p_now timestamptz
) RETURNS TABLE (
    queue text, timer_key text, partition text, deliver_at timestamptz, deliver_in_ms bigint,
    txn text, message_id uuid, attempts integer, last_error text, state text, payload_bytes bigint
)
LANGUAGE plpgsql STABLE
SET jit = off  -- see queen.log_append_v1: JIT costs far more than it saves here
AS $$
#variable_conflict use_column
DECLARE
    -- A page bigger than this is a mistake in the caller; the API asks for at most 1000.
    c_max_limit constant integer := 10000;
BEGIN
    IF coalesce(p_tenant, '') = '' OR coalesce(p_queue, '') = '' THEN
        RAISE EXCEPTION 'log_timers_list_v1: tenant and queue must be non-empty' USING ERRCODE = '22023';
    END IF;
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > c_max_limit THEN
        RAISE EXCEPTION 'log_timers_list_v1: limit must be in 1..% (got %)', c_max_limit, p_limit USING ERRCODE = '22023';
    END IF;
    IF p_now IS NULL THEN
        RAISE EXCEPTION 'log_timers_list_v1: now must be given' USING ERRCODE = '22023';
    END IF;
    RETURN QUERY
    SELECT t.queue, t.timer_key, t.partition, t.deliver_at,
           ceil(extract(epoch FROM t.deliver_at - p_now) * 1000)::bigint,
           t.txn, t.message_id, t.attempts, t.last_error,
           queen.log_timers_state_v1(t.claim_token, t.claimed_until, t.visible_at, p_now),
           octet_length(t.payload)::bigint
    FROM queen.log_timers t
    WHERE t.tenant_id = p_tenant AND t.queue = p_queue
      AND (p_after IS NULL OR t.timer_key > p_after)
    ORDER BY t.timer_key
    LIMIT p_limit;
END;
$$;

-- READ: messages of (tenant, queue, partition) from offset p_from on, in offset order, at most
-- p_limit of them and, after the first, no more than p_max_bytes of payload in all (the first is
-- always returned, so a reader can never be stuck behind one big message). An unknown queue or
-- partition has no messages: no row, not an error.
CREATE OR REPLACE FUNCTION queen.log_messages_read_v1(
    p_tenant text, p_queue text, p_partition text, p_from bigint, p_limit integer, p_max_bytes bigint
) RETURNS TABLE (
    log_offset bigint, message_id uuid, txn text, payload bytea, created_at timestamptz
)
LANGUAGE plpgsql STABLE
SET jit = off  -- see queen.log_append_v1: JIT costs far more than it saves here
AS $$
#variable_conflict use_column
DECLARE
    c_max_limit constant integer := 10000;
    v_partition_id bigint;
BEGIN
    IF coalesce(p_tenant, '') = '' OR coalesce(p_queue, '') = '' OR coalesce(p_partition, '') = '' THEN
        RAISE EXCEPTION 'log_messages_read_v1: tenant, queue and partition must be non-empty' USING ERRCODE = '22023';
    END IF;
    IF p_from IS NULL OR p_from < 0 THEN
        RAISE EXCEPTION 'log_messages_read_v1: from must be an offset >= 0 (got %)', p_from USING ERRCODE = '22023';
    END IF;
    IF p_limit IS NULL OR p_limit < 1 OR p_limit > c_max_limit THEN
        RAISE EXCEPTION 'log_messages_read_v1: limit must be in 1..% (got %)', c_max_limit, p_limit USING ERRCODE = '22023';
    END IF;
    IF p_max_bytes IS NULL OR p_max_bytes < 1 THEN
        RAISE EXCEPTION 'log_messages_read_v1: max_bytes must be >= 1 (got %)', p_max_bytes USING ERRCODE = '22023';
    END IF;

    SELECT p.id INTO v_partition_id
    FROM queen.queues q JOIN queen.log_partitions p ON p.queue_id = q.id
    WHERE q.tenant_id = p_tenant AND q.name = p_queue AND p.name = p_partition;
    IF NOT FOUND THEN
        RETURN;
    END IF;

    RETURN QUERY
    SELECT s.log_offset, s.message_id, s.txn, s.payload, s.created_at
    FROM (
        SELECT page."offset" AS log_offset, page.message_id, page.txn, page.payload, page.created_at,
               sum(octet_length(page.payload)) OVER (ORDER BY page."offset") - octet_length(page.payload)
                   AS bytes_before
        FROM (
            SELECT m."offset", m.message_id, m.txn, m.payload, m.created_at
            FROM queen.log_messages m
            WHERE m.partition_id = v_partition_id AND m."offset" >= p_from
            ORDER BY m."offset"
            LIMIT p_limit
        ) AS page
    ) AS s
    WHERE s.bytes_before < p_max_bytes
    ORDER BY s.log_offset;
END;
$$;
