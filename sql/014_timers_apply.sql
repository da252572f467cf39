-- Queen: the schedule seam. Both the HTTP handler and the transaction wire schedule through this
-- one function, inside the caller's transaction; the caller rings its local waker after COMMIT
-- with the earliest deliverInMs this returns, and never before.
--
-- p_ops is a JSON array of operations:
--   {"op": "schedule",   "queue", "timerKey", "delayMs",
--                         "payloadJson" | "payload" | "payloadBase64",
--                         optional "partition" (default "default"), "txn"}
--   {"op": "reschedule", "queue", "timerKey", "delayMs",
--                         optional "payloadJson" | "payload" | "payloadBase64", "partition", "txn"}
--   {"op": "cancel",     "queue", "timerKey"}
-- "payloadJson" is a string holding the text of a JSON value, stored as exactly those UTF-8 bytes:
-- what the broker sends, so any JSON a client wrote reads back as written (key order, numbers,
-- escapes such as \u0000, which jsonb refuses with SQLSTATE 22P05). "payload" is a JSON value
-- inside p_ops, stored as jsonb's text of it (keys sorted, numbers rewritten): for callers in SQL.
-- "payloadBase64" carries raw bytes.
-- delayMs is relative to p_now (the server's now) and may be negative: the timer is due at once.
--
-- Statuses: scheduled (new row), rescheduled (an existing row replaced or moved), cancelled,
-- absent (no such timer for this tenant), too_late (the row is in a sweeper's hands: held with a
-- live lease; it is left unchanged and will fire).
--
-- Server-owned fields (messageId, tenant, deliverAt, attempts, claim token...) and unknown fields
-- are rejected with SQLSTATE 22023 and nothing is written: the whole call raises.
-- Rows are locked in primary-key order, so two concurrent calls cannot deadlock each other.
CREATE OR REPLACE FUNCTION queen.log_timers_apply_v1(
    p_tenant text, p_ops jsonb, p_now timestamptz
) RETURNS jsonb
LANGUAGE plpgsql
SET enable_seqscan = off  -- see queen.log_append_v1: no plan cached on a small table may scan a big one
SET jit = off  -- see queen.log_append_v1: JIT costs far more than it saves here
AS $$
#variable_conflict use_column
DECLARE
    c_allowed constant text[] := ARRAY['op', 'queue', 'timerKey', 'partition', 'delayMs', 'txn',
                                        'payload', 'payloadJson', 'payloadBase64'];
    c_server_owned constant text[] := ARRAY['messageId', 'message_id', 'tenant', 'tenantId', 'tenant_id',
                                             'deliverAt', 'deliver_at', 'attempts', 'token', 'claimToken',
                                             'claim_token', 'claimedUntil', 'claimed_until', 'lastError',
                                             'visibleAt', 'shard', 'offset'];
    -- |delayMs| beyond ten years is a unit mistake, not a schedule; the HTTP layer enforces the
    -- configured horizon, this only keeps the arithmetic sane.
    c_max_abs_delay_ms constant bigint := 315360000000;
    v_op jsonb;
    v_idx integer;
    v_kind text;
    v_field text;
    v_results jsonb[];
    v_row queen.log_timers%ROWTYPE;
    v_payload bytea;
    v_deliver_at timestamptz;
    v_status text;
    v_message_id uuid;
    v_inserted integer;
    -- Rounds of insert-then-lock a schedule tries when concurrent callers keep inserting and
    -- deleting the same key under it; each extra round needs two more concurrent commits on it.
    c_insert_attempts constant integer := 5;
BEGIN
    IF coalesce(p_tenant, '') = '' THEN
        RAISE EXCEPTION 'log_timers_apply_v1: tenant must be non-empty' USING ERRCODE = '22023';
    END IF;
    IF p_now IS NULL THEN
        RAISE EXCEPTION 'log_timers_apply_v1: now must be given' USING ERRCODE = '22023';
    END IF;
    IF p_ops IS NULL OR jsonb_typeof(p_ops) <> 'array' THEN
        RAISE EXCEPTION 'log_timers_apply_v1: ops must be a JSON array' USING ERRCODE = '22023';
    END IF;

    -- Validate every op before writing anything.
    FOR v_op, v_idx IN SELECT o.value, o.ord::integer - 1 FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS o(value, ord) LOOP
        IF jsonb_typeof(v_op) <> 'object' THEN
            RAISE EXCEPTION 'log_timers_apply_v1: op % is not a JSON object', v_idx USING ERRCODE = '22023';
        END IF;
        FOR v_field IN SELECT jsonb_object_keys(v_op) LOOP
            IF v_field = ANY (c_server_owned) THEN
                RAISE EXCEPTION 'log_timers_apply_v1: op %: field "%" is server-owned and cannot be set by a caller', v_idx, v_field
                    USING ERRCODE = '22023';
            ELSIF NOT (v_field = ANY (c_allowed)) THEN
                RAISE EXCEPTION 'log_timers_apply_v1: op %: unknown field "%" (allowed: %)', v_idx, v_field, c_allowed
                    USING ERRCODE = '22023';
            END IF;
        END LOOP;
        v_kind := v_op->>'op';
        IF v_kind IS NULL OR v_kind NOT IN ('schedule', 'reschedule', 'cancel') THEN
            RAISE EXCEPTION 'log_timers_apply_v1: op %: "op" must be schedule, reschedule or cancel (got %)', v_idx, coalesce(v_op->>'op', 'nothing')
                USING ERRCODE = '22023';
        END IF;
        IF jsonb_typeof(v_op->'queue') IS DISTINCT FROM 'string' OR v_op->>'queue' = ''
           OR jsonb_typeof(v_op->'timerKey') IS DISTINCT FROM 'string' OR v_op->>'timerKey' = '' THEN
            RAISE EXCEPTION 'log_timers_apply_v1: op %: "queue" and "timerKey" must be non-empty strings', v_idx
                USING ERRCODE = '22023';
        END IF;
        IF v_op ? 'partition' AND (jsonb_typeof(v_op->'partition') <> 'string' OR v_op->>'partition' = '') THEN
            RAISE EXCEPTION 'log_timers_apply_v1: op %: "partition" must be a non-empty string', v_idx USING ERRCODE = '22023';
        END IF;
        IF v_op ? 'txn' AND (jsonb_typeof(v_op->'txn') <> 'string' OR v_op->>'txn' = '') THEN
            RAISE EXCEPTION 'log_timers_apply_v1: op %: "txn" must be a non-empty string', v_idx USING ERRCODE = '22023';
        END IF;
        IF (v_op ? 'payload')::integer + (v_op ? 'payloadJson')::integer + (v_op ? 'payloadBase64')::integer > 1 THEN
            RAISE EXCEPTION 'log_timers_apply_v1: op %: give one of "payloadJson", "payload" and "payloadBase64"', v_idx USING ERRCODE = '22023';
        END IF;
        -- The cast to json checks the text is one JSON value and keeps it as written.
        IF v_op ? 'payloadJson' AND (jsonb_typeof(v_op->'payloadJson') <> 'string'
                                     OR (v_op->>'payloadJson')::json IS NULL) THEN
            RAISE EXCEPTION 'log_timers_apply_v1: op %: "payloadJson" must be a string holding JSON text', v_idx USING ERRCODE = '22023';
        END IF;
        IF v_op ? 'payloadBase64' AND jsonb_typeof(v_op->'payloadBase64') <> 'string' THEN
            RAISE EXCEPTION 'log_timers_apply_v1: op %: "payloadBase64" must be a base64 string', v_idx USING ERRCODE = '22023';
        END IF;
        IF v_kind = 'cancel' THEN
            IF v_op ?| ARRAY['delayMs', 'payload', 'payloadJson', 'payloadBase64', 'partition', 'txn'] THEN
                RAISE EXCEPTION 'log_timers_apply_v1: op %: cancel takes only "queue" and "timerKey"', v_idx USING ERRCODE = '22023';
            END IF;
        ELSE
            IF jsonb_typeof(v_op->'delayMs') IS DISTINCT FROM 'number'
               OR (v_op->>'delayMs')::numeric <> trunc((v_op->>'delayMs')::numeric)
               OR abs((v_op->>'delayMs')::numeric) > c_max_abs_delay_ms THEN
                RAISE EXCEPTION 'log_timers_apply_v1: op %: "delayMs" must be an integer number of milliseconds within ten years (got %)', v_idx, coalesce(v_op->>'delayMs', 'nothing')
                    USING ERRCODE = '22023';
            END IF;
            IF v_kind = 'schedule' AND NOT (v_op ?| ARRAY['payload', 'payloadJson', 'payloadBase64']) THEN
                RAISE EXCEPTION 'log_timers_apply_v1: op %: schedule needs "payloadJson", "payload" or "payloadBase64"', v_idx USING ERRCODE = '22023';
            END IF;
        END IF;
    END LOOP;
    IF (SELECT count(*) FROM jsonb_array_elements(p_ops)) <>
       (SELECT count(DISTINCT (o->>'queue', o->>'timerKey')) FROM jsonb_array_elements(p_ops) AS o) THEN
        RAISE EXCEPTION 'log_timers_apply_v1: the same (queue, timerKey) appears twice in one call' USING ERRCODE = '22023';
    END IF;

    v_results := array_fill(NULL::jsonb, ARRAY[jsonb_array_length(p_ops)]);

    -- Apply in primary-key order.
    FOR v_op, v_idx IN
        SELECT o.value, o.ord::integer - 1 FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS o(value, ord)
        ORDER BY o.value->>'queue', o.value->>'timerKey'
    LOOP
        v_kind := v_op->>'op';
        v_payload := CASE WHEN v_op ? 'payloadJson' THEN convert_to(v_op->>'payloadJson', 'UTF8')
                          WHEN v_op ? 'payloadBase64' THEN decode(v_op->>'payloadBase64', 'base64')
                          WHEN v_op ? 'payload' THEN convert_to((v_op->'payload')::text, 'UTF8') END;
        v_deliver_at := p_now + make_interval(secs => coalesce((v_op->>'delayMs')::numeric, 0) / 1000.0);
        v_message_id := NULL;

        SELECT * INTO v_row FROM queen.log_timers t
        WHERE t.tenant_id = p_tenant AND t.queue = v_op->>'queue' AND t.timer_key = v_op->>'timerKey'
        FOR UPDATE;

        IF NOT FOUND AND v_kind = 'schedule' THEN
            v_message_id := gen_random_uuid();
            v_status := NULL;
            FOR v_attempt IN 1..c_insert_attempts LOOP
                -- A delivery already past is visible from p_now, not before (see 010).
                INSERT INTO queen.log_timers (tenant_id, queue, timer_key, partition, deliver_at, txn,
                                              message_id, payload, created_at, claimed_until)
                VALUES (p_tenant, v_op->>'queue', v_op->>'timerKey', coalesce(v_op->>'partition', 'default'),
                        v_deliver_at, coalesce(v_op->>'txn', v_message_id::text), v_message_id, v_payload, p_now,
                        CASE WHEN v_deliver_at < p_now THEN p_now END)
                ON CONFLICT (tenant_id, queue, timer_key) DO NOTHING;
                GET DIAGNOSTICS v_inserted = ROW_COUNT;
                IF v_inserted > 0 THEN
                    v_status := 'scheduled';
                    EXIT;
                END IF;
                -- A concurrent caller inserted the same key and committed while we looked: treat
                -- it as existing. By the time we lock it, it may be gone again (cancelled or fired
                -- meanwhile); then the key is free and we insert once more.
                SELECT * INTO v_row FROM queen.log_timers t
                WHERE t.tenant_id = p_tenant AND t.queue = v_op->>'queue' AND t.timer_key = v_op->>'timerKey'
                FOR UPDATE;
                EXIT WHEN FOUND;
                IF v_attempt = c_insert_attempts THEN
                    RAISE EXCEPTION 'log_timers_apply_v1: op %: (%, %) was inserted and deleted again by concurrent callers % times; retry the call',
                        v_idx, v_op->>'queue', v_op->>'timerKey', c_insert_attempts
                        USING ERRCODE = '40001';
                END IF;
            END LOOP;
        ELSIF NOT FOUND THEN
            v_status := 'absent';
        ELSE
            v_status := NULL;
        END IF;

        IF v_status IS NULL THEN
            IF v_row.claim_token IS NOT NULL AND v_row.claimed_until > p_now THEN
                v_status := 'too_late';
                v_message_id := v_row.message_id;
                v_deliver_at := v_row.deliver_at;
            ELSIF v_kind = 'cancel' THEN
                DELETE FROM queen.log_timers t
                WHERE t.tenant_id = p_tenant AND t.queue = v_row.queue AND t.timer_key = v_row.timer_key;
                v_status := 'cancelled';
                v_message_id := v_row.message_id;
                v_deliver_at := v_row.deliver_at;
            ELSE
                -- schedule over an existing key replaces it; reschedule moves it (and replaces
                -- what it was given). Either way the message id is kept, so a retried request
                -- names the same message, and the row starts over: no claim, no attempts.
                UPDATE queen.log_timers t
                SET deliver_at = v_deliver_at,
                    payload = coalesce(v_payload, t.payload),
                    partition = coalesce(v_op->>'partition', CASE WHEN v_kind = 'schedule' THEN 'default' END, t.partition),
                    txn = coalesce(v_op->>'txn', t.txn),
                    attempts = 0, last_error = NULL, claim_token = NULL,
                    claimed_until = CASE WHEN v_deliver_at < p_now THEN p_now END
                WHERE t.tenant_id = p_tenant AND t.queue = v_row.queue AND t.timer_key = v_row.timer_key;
                v_status := 'rescheduled';
                v_message_id := v_row.message_id;
            END IF;
        END IF;

        v_results[v_idx + 1] := jsonb_strip_nulls(jsonb_build_object(
            'index', v_idx,
            'op', v_kind,
            'queue', v_op->>'queue',
            'timerKey', v_op->>'timerKey',
            'status', v_status,
            'messageId', v_message_id,
            'deliverAt', CASE WHEN v_status = 'absent' THEN NULL ELSE v_deliver_at END,
            'deliverInMs', CASE WHEN v_status IN ('scheduled', 'rescheduled')
                                THEN ceil(extract(epoch FROM v_deliver_at - p_now) * 1000)::bigint END
        ));
    END LOOP;

    RETURN to_jsonb(v_results);
END;
$$;
