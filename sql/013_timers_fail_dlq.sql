-- Queen: what happens to claimed timers whose fire failed.
--
-- The caller classifies the failure (sweeper/src/classify.rs) and computes each row's backoff
-- (a pure function of its attempts); these functions only apply the decision to rows the caller
-- still holds with its token. Rows it no longer holds are left alone: somebody else owns them.

-- FAIL: put held rows into backoff: claim_token = NULL, claimed_until = now + backoff (invisible to
-- the claim, still cancellable). A transient failure (the database was unavailable, a
-- serialization conflict) spends no attempt; any other failure spends one and records the error.
-- A row whose attempts reach p_max_attempts is not put into backoff: it stays held with its token
-- and comes back exhausted = true, for the caller to hand to log_timers_dlq_v1.
CREATE OR REPLACE FUNCTION queen.log_timers_fail_v1(
    p_tenants text[],
    p_queues text[],
    p_timer_keys text[],
    p_tokens uuid[],
    p_backoff_ms integer[],
    p_error text,
    p_transient boolean,
    p_max_attempts integer,
    p_now timestamptz
) RETURNS TABLE (tenant_id text, queue text, timer_key text, attempts integer, exhausted boolean)
LANGUAGE plpgsql
SET enable_seqscan = off  -- see queen.log_append_v1: no plan cached on a small table may scan a big one
SET plan_cache_mode = force_custom_plan  -- see queen.log_timers_claim_v1: one plan per call, made for its rows
SET jit = off  -- see queen.log_append_v1: JIT costs far more than it saves here
AS $$
#variable_conflict use_column
DECLARE
    v_rows integer := coalesce(cardinality(p_timer_keys), 0);
    v_row_ids tid[] := '{}';
    v_backoffs integer[] := '{}';
    v_attempt integer;
    -- Polls for a row that is ours but locked this instant: 1+2+...+128 ms at most, longer than
    -- the fire's (a broker under load can take tens of ms to abort the failed call). Not measured.
    c_busy_retries constant integer := 8;
BEGIN
    IF cardinality(p_tenants) IS DISTINCT FROM v_rows OR cardinality(p_queues) IS DISTINCT FROM v_rows
       OR cardinality(p_tokens) IS DISTINCT FROM v_rows OR cardinality(p_backoff_ms) IS DISTINCT FROM v_rows THEN
        RAISE EXCEPTION 'log_timers_fail_v1: misaligned arrays (tenants %, queues %, keys %, tokens %, backoff_ms %)',
            cardinality(p_tenants), cardinality(p_queues), v_rows, cardinality(p_tokens), cardinality(p_backoff_ms)
            USING ERRCODE = '22023';
    END IF;
    IF p_now IS NULL OR p_transient IS NULL OR p_max_attempts IS NULL OR p_max_attempts < 1
       OR EXISTS (SELECT 1 FROM unnest(p_backoff_ms) AS b WHERE b IS NULL OR b < 0) THEN
        RAISE EXCEPTION 'log_timers_fail_v1: now and transient must be given, max_attempts >= 1 and every backoff_ms >= 0 (got max_attempts %)',
            p_max_attempts USING ERRCODE = '22023';
    END IF;

    -- Lock the rows still held with our token, skipping any another transaction has locked. A row
    -- that is ours but locked this instant is polled for briefly, as the fire does: almost always
    -- it is the failed call's own transaction, whose error reached the broker before its locks
    -- were released (PostgreSQL sends the error, then aborts), or a concurrent claim's recheck.
    -- Skipping it would leave it held, by a live broker, until its lease ran out.
    FOR v_attempt IN 0 .. c_busy_retries LOOP
        IF v_attempt > 0 THEN
            PERFORM pg_sleep(0.001 * (1 << (v_attempt - 1)));
        END IF;
        SELECT v_row_ids || coalesce(array_agg(h.row_id), '{}'), v_backoffs || coalesce(array_agg(h.backoff_ms), '{}')
        INTO v_row_ids, v_backoffs
        FROM (
            SELECT t.ctid AS row_id, w.backoff_ms
            FROM unnest(p_tenants, p_queues, p_timer_keys, p_tokens, p_backoff_ms)
                AS w(tenant_id, queue, timer_key, token, backoff_ms)
            JOIN queen.log_timers t
              ON t.tenant_id = w.tenant_id AND t.queue = w.queue AND t.timer_key = w.timer_key
            WHERE t.claim_token = w.token AND t.ctid <> ALL (v_row_ids)
            FOR UPDATE OF t SKIP LOCKED
        ) AS h;
        EXIT WHEN NOT EXISTS (
            SELECT 1
            FROM unnest(p_tenants, p_queues, p_timer_keys, p_tokens) AS w(tenant_id, queue, timer_key, token)
            JOIN queen.log_timers t
              ON t.tenant_id = w.tenant_id AND t.queue = w.queue AND t.timer_key = w.timer_key
            WHERE t.claim_token = w.token AND t.ctid <> ALL (v_row_ids));
    END LOOP;

    RETURN QUERY
    WITH held AS (
        SELECT h.row_id, h.backoff_ms
        FROM unnest(v_row_ids, v_backoffs) AS h(row_id, backoff_ms)
    ), updated AS (
        UPDATE queen.log_timers t
        SET attempts = t.attempts + CASE WHEN p_transient THEN 0 ELSE 1 END,
            last_error = CASE WHEN p_transient THEN t.last_error ELSE left(p_error, 2000) END,
            claim_token = CASE WHEN t.attempts + 1 >= p_max_attempts AND NOT p_transient
                               THEN t.claim_token ELSE NULL END,
            claimed_until = CASE WHEN t.attempts + 1 >= p_max_attempts AND NOT p_transient
                                 THEN t.claimed_until
                                 ELSE p_now + make_interval(secs => h.backoff_ms / 1000.0) END
        FROM held h
        WHERE t.ctid = h.row_id
        RETURNING t.tenant_id, t.queue, t.timer_key, t.attempts,
                  (t.claim_token IS NOT NULL) AS exhausted
    )
    SELECT u.tenant_id, u.queue, u.timer_key, u.attempts, u.exhausted
    FROM updated u
    ORDER BY u.tenant_id, u.queue, u.timer_key;
END;
$$;

-- DLQ: archive exhausted rows, still held with the caller's token, into queen.log_dlq with their
-- payload byte for byte, and delete them. A row that is no longer held with that token (its lease
-- ran out and it was rescheduled, cancelled or re-claimed meanwhile) is skipped: it is not dead.
CREATE OR REPLACE FUNCTION queen.log_timers_dlq_v1(
    p_tenants text[],
    p_queues text[],
    p_timer_keys text[],
    p_tokens uuid[],
    p_now timestamptz
) RETURNS TABLE (tenant_id text, queue text, timer_key text, dlq_id bigint)
LANGUAGE plpgsql
SET enable_seqscan = off  -- see queen.log_append_v1: no plan cached on a small table may scan a big one
SET plan_cache_mode = force_custom_plan  -- see queen.log_timers_claim_v1: one plan per call, made for its rows
SET jit = off  -- see queen.log_append_v1: JIT costs far more than it saves here
AS $$
#variable_conflict use_column
DECLARE
    v_rows integer := coalesce(cardinality(p_timer_keys), 0);
BEGIN
    IF cardinality(p_tenants) IS DISTINCT FROM v_rows OR cardinality(p_queues) IS DISTINCT FROM v_rows
       OR cardinality(p_tokens) IS DISTINCT FROM v_rows THEN
        RAISE EXCEPTION 'log_timers_dlq_v1: misaligned arrays (tenants %, queues %, keys %, tokens %)',
            cardinality(p_tenants), cardinality(p_queues), v_rows, cardinality(p_tokens)
            USING ERRCODE = '22023';
    END IF;
    IF p_now IS NULL THEN
        RAISE EXCEPTION 'log_timers_dlq_v1: now must be given' USING ERRCODE = '22023';
    END IF;

    RETURN QUERY
    WITH wanted AS (
        SELECT * FROM unnest(p_tenants, p_queues, p_timer_keys, p_tokens)
            AS w(tenant_id, queue, timer_key, token)
    ), held AS (
        SELECT t.tenant_id, t.queue, t.timer_key
        FROM queen.log_timers t
        JOIN wanted w ON t.tenant_id = w.tenant_id AND t.queue = w.queue AND t.timer_key = w.timer_key
        WHERE t.claim_token = w.token
        FOR UPDATE OF t SKIP LOCKED
    ), gone AS (
        DELETE FROM queen.log_timers t
        USING held h
        WHERE t.tenant_id = h.tenant_id AND t.queue = h.queue AND t.timer_key = h.timer_key
        RETURNING t.*
    ), archived AS (
        INSERT INTO queen.log_dlq (tenant_id, queue, timer_key, partition, deliver_at, txn,
                                   message_id, payload, attempts, last_error, dead_at)
        SELECT g.tenant_id, g.queue, g.timer_key, g.partition, g.deliver_at, g.txn,
               g.message_id, g.payload, g.attempts, g.last_error, p_now
        FROM gone g
        RETURNING log_dlq.tenant_id, log_dlq.queue, log_dlq.timer_key, log_dlq.id
    )
    SELECT a.tenant_id, a.queue, a.timer_key, a.id FROM archived a
    ORDER BY a.tenant_id, a.queue, a.timer_key;
END;
$$;
