-- Idempotency keys of schedule calls: the API's optional `Idempotency-Key` header on
-- POST /api/v1/timers. A retry with the same key (and the same request) within the window answers
-- the first call's results and schedules nothing; with another request, it is refused.
--
-- Both calls run inside the schedule's own transaction: the key is taken before the ops are
-- applied and its answer stored before the commit, so the key, the timers and the answer commit
-- together or not at all. A second call with the key while the first is in flight waits on the
-- first's uncommitted row (ON CONFLICT), then sees its answer, or takes the key if it rolled back.

CREATE TABLE IF NOT EXISTS queen.api_idempotency (
    tenant     text        NOT NULL,
    key        text        NOT NULL,
    -- SHA-256 of the request body: the same key with another request is a client's mistake.
    request    bytea       NOT NULL,
    -- The results, as the API answered them; set before the commit.
    answer     jsonb,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, key)
);

CREATE INDEX IF NOT EXISTS api_idempotency_created_at ON queen.api_idempotency (created_at);

-- Takes `p_key` for this transaction, or reports who has it. Expired keys go first: this key's
-- own, and up to 16 others (skipping rows another call holds), so the table stays bounded by the
-- keyed calls of one window with no job of its own.
-- Answers {"fresh": true} when the key is this call's, else
-- {"fresh": false, "sameRequest": bool, "answer": <the first call's results>}.
CREATE OR REPLACE FUNCTION queen.api_idempotency_begin_v1(
    p_tenant text, p_key text, p_request bytea, p_window_ms bigint, p_now timestamptz
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_expired timestamptz := p_now - make_interval(secs => p_window_ms / 1000.0);
    v_row queen.api_idempotency;
BEGIN
    IF p_window_ms < 1 THEN
        RAISE EXCEPTION 'api_idempotency_begin_v1: the window must be at least 1 ms, got %', p_window_ms
            USING ERRCODE = '22023';
    END IF;
    DELETE FROM queen.api_idempotency
    WHERE ctid IN (SELECT ctid FROM queen.api_idempotency
                   WHERE created_at < v_expired
                   ORDER BY created_at LIMIT 16
                   FOR UPDATE SKIP LOCKED);
    DELETE FROM queen.api_idempotency
    WHERE tenant = p_tenant AND key = p_key AND created_at < v_expired;
    INSERT INTO queen.api_idempotency (tenant, key, request, created_at)
    VALUES (p_tenant, p_key, p_request, p_now)
    ON CONFLICT (tenant, key) DO NOTHING;
    IF FOUND THEN
        RETURN jsonb_build_object('fresh', true);
    END IF;
    SELECT * INTO v_row FROM queen.api_idempotency WHERE tenant = p_tenant AND key = p_key;
    RETURN jsonb_build_object(
        'fresh', false,
        'sameRequest', v_row.request = p_request,
        'answer', v_row.answer
    );
END;
$$;

-- Stores the answer of the call that took `p_key` (in its transaction, before the commit).
CREATE OR REPLACE FUNCTION queen.api_idempotency_finish_v1(
    p_tenant text, p_key text, p_answer jsonb
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE queen.api_idempotency SET answer = p_answer WHERE tenant = p_tenant AND key = p_key;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'api_idempotency_finish_v1: the key (%, %) was not taken in this transaction', p_tenant, p_key
            USING ERRCODE = '22023';
    END IF;
END;
$$;
