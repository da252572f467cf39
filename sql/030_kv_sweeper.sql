-- Queen: the sweeper's slow phases, the KV prune and the usage rollup.
--
-- They live in their own file because the broker must boot and answer correctly without them:
-- when either function is missing (SQLSTATE class 42), the sweeper switches that phase off for
-- the life of the process with one warning, and keeps firing timers.

-- The prune's alarm: {expired, expiredCapped, lagMs}, the expired-but-present rows counted up to
-- p_cap and how long the oldest has been dead. Bounded: 64 seeks for the oldest, at most p_cap + 1
-- index entries for the count. The prune reports it after every call; the sweeper's probe carries
-- it on every pass (queen.sweeper_probe_v1), so it keeps counting while the prune is shed.
CREATE OR REPLACE FUNCTION queen.kv_expired_v1(p_shards integer[], p_now timestamptz, p_cap integer)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET enable_seqscan = off  -- see queen.log_append_v1: no plan cached on a small table may scan a big one
SET jit = off  -- see queen.log_append_v1: JIT costs far more than it saves here
AS $$
DECLARE
    v_expired bigint;
    v_oldest timestamptz;
BEGIN
    SELECT count(*) INTO v_expired
    FROM (
        SELECT 1
        FROM unnest(p_shards) AS s(shard)
        CROSS JOIN LATERAL (
            SELECT 1 FROM queen.kv k
            WHERE k.shard = s.shard AND k.expires_at IS NOT NULL AND k.expires_at <= p_now
            LIMIT p_cap + 1
        ) AS e
        LIMIT p_cap + 1
    ) AS capped;
    SELECT min(h.expires_at) INTO v_oldest
    FROM unnest(p_shards) AS s(shard)
    CROSS JOIN LATERAL (
        SELECT k.expires_at FROM queen.kv k
        WHERE k.shard = s.shard AND k.expires_at IS NOT NULL AND k.expires_at <= p_now
        ORDER BY k.expires_at
        LIMIT 1
    ) AS h;
    RETURN jsonb_build_object(
        'expired', least(v_expired, p_cap),
        'expiredCapped', v_expired > p_cap,
        'lagMs', CASE WHEN v_oldest IS NULL THEN 0
                      ELSE floor(extract(epoch FROM p_now - v_oldest) * 1000)::bigint END
    );
END;
$$;

-- PRUNE: deletes up to p_max_rows expired rows, visiting shards in the caller's order, and
-- reports {deleted, done, unpruned, unprunedCapped, lagMs}:
--   deleted         rows removed by this call;
--   done            the scan found fewer expired rows than the budget (nothing more to do now);
--   unpruned        expired rows still present after this call, counted up to p_unpruned_cap,
--                   computed on every pass, including passes that delete nothing: this is the
--                   alarm that tells an unpruned table from a healthy one;
--   unprunedCapped  there are more than p_unpruned_cap;
--   lagMs           how long the oldest still-present expired row has been dead.
-- Candidates are found without locks, then locked FOR UPDATE SKIP LOCKED: a row another open
-- transaction holds (a put, the transaction wire) is skipped, never waited on. Under the lock the
-- row is checked again with kv_live_v1, so a row re-put with a later expiry is spared.
CREATE OR REPLACE FUNCTION queen.kv_expire_step_v1(
    p_shards integer[], p_now timestamptz, p_max_rows integer, p_unpruned_cap integer DEFAULT 10000
) RETURNS jsonb
LANGUAGE plpgsql
SET enable_seqscan = off  -- see queen.log_append_v1: no plan cached on a small table may scan a big one
SET jit = off  -- see queen.log_append_v1: JIT costs far more than it saves here
AS $$
#variable_conflict use_column
DECLARE
    v_found integer;
    v_deleted integer;
    v_alarm jsonb;
BEGIN
    PERFORM queen.shards_check_v1('kv_expire_step_v1', p_shards);
    IF p_now IS NULL OR p_max_rows IS NULL OR p_max_rows <= 0 OR p_unpruned_cap IS NULL OR p_unpruned_cap < 0 THEN
        RAISE EXCEPTION 'kv_expire_step_v1: now must be given, max_rows > 0 and unpruned_cap >= 0 (got %, %)',
            p_max_rows, p_unpruned_cap USING ERRCODE = '22023';
    END IF;

    WITH candidates AS MATERIALIZED (
        SELECT c.tenant_id, c.namespace, c.key
        FROM unnest(p_shards) AS s(shard)
        CROSS JOIN LATERAL (
            SELECT k.tenant_id, k.namespace, k.key
            FROM queen.kv k
            WHERE k.shard = s.shard AND k.expires_at IS NOT NULL AND k.expires_at <= p_now
            ORDER BY k.expires_at
            LIMIT p_max_rows
        ) AS c
        LIMIT p_max_rows
    ), locked AS (
        SELECT k.tenant_id, k.namespace, k.key
        FROM queen.kv k
        JOIN candidates c ON k.tenant_id = c.tenant_id AND k.namespace = c.namespace AND k.key = c.key
        WHERE NOT queen.kv_live_v1(k.expires_at, p_now)
        FOR UPDATE OF k SKIP LOCKED
    ), deleted AS (
        DELETE FROM queen.kv k
        USING locked l
        WHERE k.tenant_id = l.tenant_id AND k.namespace = l.namespace AND k.key = l.key
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM candidates), (SELECT count(*) FROM deleted)
    INTO v_found, v_deleted;

    v_alarm := queen.kv_expired_v1(p_shards, p_now, p_unpruned_cap);
    RETURN jsonb_build_object(
        'deleted', v_deleted,
        'done', v_found < p_max_rows,
        'unpruned', v_alarm->'expired',
        'unprunedCapped', v_alarm->'expiredCapped',
        'lagMs', v_alarm->'lagMs'
    );
END;
$$;

-- ROLLUP: per-tenant live KV rows/bytes and pending timer rows/bytes into queen.kv_usage, for up
-- to p_max_tenants tenants after p_after_tenant (NULL: from the first), in tenant order. Walks the
-- primary keys, which lead with tenant_id, so one step costs the rows of its tenants, not of the
-- table. Tenants of kv_usage inside the covered range that no longer have any row are written as
-- zeros. Returns {tenants, zeroed, done, lastTenant}; call again with lastTenant until done.
--
-- Bytes are the lengths, in bytes as stored, of what a tenant controls: namespace, key and the
-- value's JSON text for KV; queue, timer key and payload for timers.
--
-- The rollup deliberately does not take shards: its unit of work is a tenant, and the primary
-- keys (not the shard indexes) are what make a tenant range cheap to read.
CREATE OR REPLACE FUNCTION queen.kv_usage_step_v1(
    p_after_tenant text, p_now timestamptz, p_max_tenants integer
) RETURNS jsonb
LANGUAGE plpgsql
SET jit = off  -- see queen.log_append_v1: JIT costs far more than it saves here
AS $$
#variable_conflict use_column
DECLARE
    v_after text := coalesce(p_after_tenant, '');
    v_tenants text[];
    v_done boolean;
    v_last text;
    v_zeroed integer;
BEGIN
    IF p_now IS NULL OR p_max_tenants IS NULL OR p_max_tenants <= 0 THEN
        RAISE EXCEPTION 'kv_usage_step_v1: now must be given and max_tenants > 0 (got %)', p_max_tenants
            USING ERRCODE = '22023';
    END IF;

    -- The next tenants, by loose index scans over both primary keys, each bounded by the budget.
    WITH RECURSIVE kv_tenants AS (
        SELECT (SELECT min(k.tenant_id) FROM queen.kv k WHERE k.tenant_id > v_after) AS tenant, 1 AS depth
        UNION ALL
        SELECT (SELECT min(k.tenant_id) FROM queen.kv k WHERE k.tenant_id > kt.tenant), kt.depth + 1
        FROM kv_tenants kt WHERE kt.tenant IS NOT NULL AND kt.depth < p_max_tenants
    ), timer_tenants AS (
        SELECT (SELECT min(t.tenant_id) FROM queen.log_timers t WHERE t.tenant_id > v_after) AS tenant, 1 AS depth
        UNION ALL
        SELECT (SELECT min(t.tenant_id) FROM queen.log_timers t WHERE t.tenant_id > tt.tenant), tt.depth + 1
        FROM timer_tenants tt WHERE tt.tenant IS NOT NULL AND tt.depth < p_max_tenants
    )
    SELECT coalesce(array_agg(tenant ORDER BY tenant), '{}') INTO v_tenants
    FROM (
        SELECT tenant FROM kv_tenants WHERE tenant IS NOT NULL
        UNION
        SELECT tenant FROM timer_tenants WHERE tenant IS NOT NULL
        ORDER BY tenant
        LIMIT p_max_tenants
    ) AS next_tenants;

    v_done := cardinality(v_tenants) < p_max_tenants;
    v_last := v_tenants[cardinality(v_tenants)];

    -- One statement writes every kv_usage row of this step, measured and zeroed alike, in tenant
    -- order. Two rollups whose snapshots disagree on which tenants drained (rows were written and
    -- pruned or fired between them) would otherwise lock the same rows in crossed orders, the
    -- measured ones first and the zeroed ones after, and deadlock each other.
    WITH measured AS (
        SELECT tn.tenant,
               coalesce(kvs.n, 0) AS kv_rows, coalesce(kvs.bytes, 0) AS kv_bytes,
               coalesce(tms.n, 0) AS timer_rows, coalesce(tms.bytes, 0) AS timer_bytes,
               false AS zeroing
        FROM unnest(v_tenants) AS tn(tenant)
        LEFT JOIN LATERAL (
            SELECT count(*) AS n,
                   sum(octet_length(k.namespace) + octet_length(k.key) + octet_length(k.value)) AS bytes
            FROM queen.kv k
            WHERE k.tenant_id = tn.tenant AND queen.kv_live_v1(k.expires_at, p_now)
        ) AS kvs ON true
        LEFT JOIN LATERAL (
            SELECT count(*) AS n,
                   sum(octet_length(t.queue) + octet_length(t.timer_key) + octet_length(t.payload)) AS bytes
            FROM queen.log_timers t
            WHERE t.tenant_id = tn.tenant
        ) AS tms ON true
        UNION ALL
        -- Tenants we have numbers for but that have no rows left in the range this step covered.
        SELECT u.tenant_id, 0, 0, 0, 0, true
        FROM queen.kv_usage u
        WHERE u.tenant_id > v_after
          AND (v_done OR u.tenant_id <= v_last)
          AND NOT (u.tenant_id = ANY (v_tenants))
          AND (u.kv_rows, u.kv_bytes, u.timer_rows, u.timer_bytes) <> (0, 0, 0, 0)
    ), written AS (
        INSERT INTO queen.kv_usage AS u (tenant_id, kv_rows, kv_bytes, timer_rows, timer_bytes, measured_at)
        SELECT m.tenant, m.kv_rows, m.kv_bytes, m.timer_rows, m.timer_bytes, p_now
        FROM measured m
        ORDER BY m.tenant
        ON CONFLICT (tenant_id) DO UPDATE
        SET kv_rows = EXCLUDED.kv_rows, kv_bytes = EXCLUDED.kv_bytes,
            timer_rows = EXCLUDED.timer_rows, timer_bytes = EXCLUDED.timer_bytes,
            measured_at = EXCLUDED.measured_at
        RETURNING u.tenant_id
    )
    SELECT count(*) INTO v_zeroed
    FROM written w JOIN measured m ON m.tenant = w.tenant_id
    WHERE m.zeroing;

    RETURN jsonb_strip_nulls(jsonb_build_object(
        'tenants', cardinality(v_tenants), 'zeroed', v_zeroed, 'done', v_done, 'lastTenant', v_last));
END;
$$;
