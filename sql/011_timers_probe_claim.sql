-- Queen: the sweeper's read path over log_timers. PROBE (read-only, one server now()) and CLAIM
-- (FOR UPDATE SKIP LOCKED: a vertex that never waits).

-- Shard lists come from the broker: a rotation of 0..63 whose first element is its starting shard.
-- Both functions insist on a well-formed list, because a duplicate would double-count and an
-- out-of-range shard would silently scan nothing.
CREATE OR REPLACE FUNCTION queen.shards_check_v1(p_fn text, p_shards integer[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF p_shards IS NULL OR cardinality(p_shards) = 0 THEN
        RAISE EXCEPTION '%: shards must be a non-empty array of 0..63', p_fn USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_shards) AS s WHERE s IS NULL OR s < 0 OR s > 63) THEN
        RAISE EXCEPTION '%: every shard must be in 0..63 (got %)', p_fn, p_shards USING ERRCODE = '22023';
    END IF;
    IF (SELECT count(DISTINCT s) FROM unnest(p_shards) AS s) <> cardinality(p_shards) THEN
        RAISE EXCEPTION '%: shards must not repeat (got %)', p_fn, p_shards USING ERRCODE = '22023';
    END IF;
END;
$$;

-- HEAD FLOORS. A deleted or moved row leaves a dead entry in log_timers_shard_visible_idx until
-- vacuum removes it, and vacuum can remove none while any session holds an old snapshot (an idle
-- transaction: a common operations accident). Every fired timer leaves its dead entries at the
-- head of its shard, exactly where the probe and the pick start reading, so with the horizon
-- pinned each of their seeks walked every timer fired since: 150 000 dead rows made a probe take
-- 128-164 ms instead of under 1 ms (by hand at 8dbe3d7, PostgreSQL 15, a snapshot held while
-- 150 000 timers were written and deleted: reports/faults/2026-12-06-2c-24g-pg15/head-floors/by-hand.md).
--
-- A floor per shard skips them: the probe reads each shard from its floor (p_floors, indexed by
-- shard + 1, epoch milliseconds; NULL reads from the start) and hands back the next floors, per
-- shard the earlier of its first live row and p_now - p_floor_margin_ms. Every row the probe saw
-- is at or above its shard's new floor, and a row written later is visible no earlier than its
-- writer's now (the invariant in 010_timers_schema.sql), so only a write that takes longer than
-- the margin to commit can land below a floor. The caller reads each shard from its start every
-- so often (QUEEN_SWEEPER_HEAD_RESCAN_MS; a NULL element of p_floors, the shards in turns), which
-- finds such a row, and anything written by hand, within that period; a floor never loses a row, it can only delay one. A writer that inserts rows
-- itself (tests, the soak's backlogs) follows the same rule: a past deliver_at gets
-- claimed_until = now().
DROP FUNCTION IF EXISTS queen.log_timers_due_v1(integer[], timestamptz, integer);

-- The timestamp a floor stands for (NULL: none, read from the start).
CREATE OR REPLACE FUNCTION queen.head_floor_v1(p_floors bigint[], p_shard integer)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(timestamptz 'epoch' + p_floors[p_shard + 1] * interval '1 millisecond',
                    timestamptz '-infinity')
$$;

-- Due rows of p_shards at p_now (visible_at <= p_now, read from each shard's floor), counted up to
-- p_limit: at most p_limit live index entries are read, whatever the backlog. Rows other
-- transactions hold count too. The probe's count and the pick's fairness gate.
CREATE OR REPLACE FUNCTION queen.log_timers_due_upto_v1(
    p_shards integer[], p_now timestamptz, p_floors bigint[], p_limit integer
) RETURNS bigint
LANGUAGE sql STABLE  -- its callers set enable_seqscan = off and jit = off
AS $$
    SELECT count(*)
    FROM (
        SELECT 1
        FROM unnest(p_shards) AS s(shard)
        CROSS JOIN LATERAL (
            SELECT 1 FROM queen.log_timers t
            WHERE t.shard = s.shard AND t.visible_at <= p_now
              AND t.visible_at >= queen.head_floor_v1(p_floors, s.shard)
            LIMIT p_limit
        ) AS d
        LIMIT p_limit
    ) AS capped
$$;

-- PROBE: {nextInMs, due, dueCapped, lateMs, floors}.
--   nextInMs  milliseconds until the earliest visible_at (0 when something is due; NULL when the
--             table is empty), rounded up so that sleeping it never wakes early;
--   due       rows claimable now, counted up to p_cap; dueCapped when there are more;
--   lateMs    how long the oldest due shard head has been past its deliver_at;
--   floors    with p_floor_margin_ms given, the next head floors: 64 epoch milliseconds, indexed
--             by shard + 1, NULL for shards not probed.
-- Cost is fixed by the shard count, not the backlog: one single-row index seek per shard for the
-- heads, and at most p_cap + 1 index entries for the count (live ones; with floors, the dead
-- entries skipped are those of the last p_floor_margin_ms).
CREATE OR REPLACE FUNCTION queen.log_timers_due_v1(
    p_shards integer[], p_now timestamptz, p_cap integer,
    p_floors bigint[] DEFAULT NULL, p_floor_margin_ms integer DEFAULT NULL
) RETURNS jsonb
LANGUAGE plpgsql STABLE
SET enable_seqscan = off  -- see queen.log_append_v1: no plan cached on a small table may scan a big one
SET jit = off  -- see queen.log_append_v1: JIT costs far more than it saves here
AS $$
DECLARE
    v_next timestamptz;
    v_oldest_due_deliver timestamptz;
    v_due bigint;
    v_head_shards integer[];
    v_heads timestamptz[];
    v_head_delivers timestamptz[];
    v_floors bigint[];
    v_i integer;
BEGIN
    PERFORM queen.shards_check_v1('log_timers_due_v1', p_shards);
    IF p_now IS NULL OR p_cap IS NULL OR p_cap < 0 THEN
        RAISE EXCEPTION 'log_timers_due_v1: now must be given and cap must be >= 0 (got now %, cap %)',
            p_now, p_cap USING ERRCODE = '22023';
    END IF;
    IF p_floors IS NOT NULL AND (array_lower(p_floors, 1) <> 1 OR array_upper(p_floors, 1) <> 64) THEN
        RAISE EXCEPTION 'log_timers_due_v1: floors must be NULL or 64 elements, one per shard (got %)',
            coalesce(array_length(p_floors, 1), 0) USING ERRCODE = '22023';
    END IF;
    IF p_floor_margin_ms < 0 THEN
        RAISE EXCEPTION 'log_timers_due_v1: floor_margin_ms must be NULL or >= 0 (got %)', p_floor_margin_ms
            USING ERRCODE = '22023';
    END IF;

    SELECT array_agg(s.shard), array_agg(h.visible_at), array_agg(h.deliver_at)
    INTO v_head_shards, v_heads, v_head_delivers
    FROM unnest(p_shards) AS s(shard)
    LEFT JOIN LATERAL (
        SELECT t.visible_at, t.deliver_at
        FROM queen.log_timers t
        WHERE t.shard = s.shard AND t.visible_at >= queen.head_floor_v1(p_floors, s.shard)
        ORDER BY t.visible_at
        LIMIT 1
    ) AS h ON true;
    SELECT min(u.visible_at), min(u.deliver_at) FILTER (WHERE u.visible_at <= p_now)
    INTO v_next, v_oldest_due_deliver
    FROM unnest(v_heads, v_head_delivers) AS u(visible_at, deliver_at);

    IF p_floor_margin_ms IS NOT NULL THEN
        -- least() ignores NULL: an empty shard's floor is p_now - margin.
        v_floors := array_fill(NULL::bigint, ARRAY[64]);
        FOR v_i IN 1 .. cardinality(v_head_shards) LOOP
            v_floors[v_head_shards[v_i] + 1] := floor(extract(epoch FROM least(
                v_heads[v_i], p_now - p_floor_margin_ms * interval '1 millisecond')) * 1000)::bigint;
        END LOOP;
    END IF;

    v_due := queen.log_timers_due_upto_v1(p_shards, p_now, p_floors, p_cap + 1);

    RETURN jsonb_build_object(
        'nextInMs', CASE WHEN v_next IS NULL THEN NULL
                         ELSE greatest(0, ceil(extract(epoch FROM v_next - p_now) * 1000))::bigint END,
        'due', least(v_due, p_cap),
        'dueCapped', v_due > p_cap,
        'lateMs', CASE WHEN v_oldest_due_deliver IS NULL THEN 0
                       ELSE greatest(0, floor(extract(epoch FROM p_now - v_oldest_due_deliver) * 1000))::bigint END
    ) || CASE WHEN v_floors IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('floors', to_jsonb(v_floors)) END;
END;
$$;

-- PICK: the selection the claim and the take share. Locks up to p_max_rows due rows nobody holds
-- (FOR UPDATE SKIP LOCKED, a vertex that never waits) and returns their addresses, tenants,
-- pre-pick visible_at, estimated bytes and fairness rank, in the order they were taken. The locks
-- are the caller's transaction's: the claim writes a lease on the rows, the take fires them.
--
-- Fairness round (p_fair_tenants > 0, every take or claim of a broker's pass): before anything else,
-- one due row from each of up to p_fair_tenants tenants, visiting tenants in primary-key order
-- after p_fair_after (wrapping around). A tenant's row is looked for among the first
-- fair_peek_rows of its primary-key range, so the round costs a bounded number of reads whatever
-- the backlog: one seek per tenant for the loose scan, at most fair_peek_rows rows per tenant.
-- With it, a tenant with a huge backlog cannot starve another tenant's single due timer for more
-- than one call (the index alone orders by visibility across tenants). These rows come back
-- with fair_rank 1, 2, ... in visiting order, and every row carries fair_next, the last tenant the
-- round visited: the caller's next round starts after it.
--
-- Shards are visited in the caller's order in rounds. A round takes at most its fair share of the
-- remaining budget from each shard, so one pick spreads over all shards instead of emptying the
-- caller's starting shard first; later rounds revisit only shards that filled their share. A round
-- that takes nothing ends the pick, so the number of rounds is bounded by p_max_rows.
--
-- p_per_tenant caps the rows one tenant can take in one pick. It is applied to each round's
-- rows; rows over the cap are left untaken.
--
-- p_max_bytes (NULL: no cap) caps the estimated bytes the rows will write, each row counting
-- octet_length(payload) + octet_length(timer_key) + p_row_overhead: the pick stops before the row
-- that would cross it, except that a first row bigger than the cap is taken alone.
--
-- Rows a round locked but did not take (over a tenant's cap or the byte cap) stay locked until
-- the caller's transaction ends; other brokers skip them for those milliseconds.
--
-- p_floors (NULL: none) are the probe's head floors: each shard is read from its floor, past the
-- dead entries under it (see HEAD FLOORS above).
--
-- The fairness round runs only when more rows are due than this pick can take: otherwise the
-- shard rounds take every due row, every tenant's included, and the round would only cost reads.
-- Its reads walk each visited tenant's primary-key range from the start, dead entries included,
-- which no floor can skip; with a snapshot pinned they grow with every timer fired.
DROP FUNCTION IF EXISTS queen.log_timers_pick_v1(text, integer[], timestamptz, integer, integer, integer, text, bigint, integer);

CREATE OR REPLACE FUNCTION queen.log_timers_pick_v1(
    p_fn text,
    p_shards integer[],
    p_now timestamptz,
    p_max_rows integer,
    p_per_tenant integer,
    p_fair_tenants integer,
    p_fair_after text,
    p_max_bytes bigint DEFAULT NULL,
    p_row_overhead integer DEFAULT 0,
    p_floors bigint[] DEFAULT NULL
) RETURNS TABLE (
    row_id tid,
    tenant_id text,
    pre_visible timestamptz,
    bytes bigint,
    fair_rank integer,
    fair_next text
)
LANGUAGE plpgsql
SET enable_seqscan = off  -- see queen.log_append_v1: no plan cached on a small table may scan a big one
SET jit = off  -- see queen.log_append_v1: JIT costs far more than it saves here
-- The generic plan PostgreSQL settles on after five calls cannot see the round's small LIMIT and
-- reads much more of each shard: 3.5 ms per 200-row claim became 12 ms (20 000 due rows).
SET plan_cache_mode = force_custom_plan
AS $$
#variable_conflict use_column
DECLARE
    v_active integer[] := p_shards;
    v_next_active integer[];
    v_remaining integer := p_max_rows;
    v_share integer;
    -- One round's rows as locked, then as kept (after the tenant and byte caps).
    v_round_ctids tid[];
    v_round_tenants text[];
    v_round_visible timestamptz[];
    v_round_bytes bigint[];
    v_round_shards integer[];
    v_round_ranks integer[];
    v_capped text[] := '{}';
    -- What this pick has locked and kept so far, by physical row address (stable while we hold
    -- the row lock), so the caller's update or fire is a TID scan and not a join against the
    -- table. No temp table: a pick runs hundreds of times a second and must not touch the
    -- catalogue.
    v_ctids tid[] := '{}';
    v_tenants text[] := '{}';
    v_pre_visible timestamptz[] := '{}';
    v_bytes bigint[] := '{}';
    v_fair_ranks integer[] := '{}';
    v_total_bytes bigint := 0;
    v_kept integer;
    v_fair_list text[];
    -- [not measured] fair_peek_rows = 64: rows of a tenant's key range the fairness round reads.
    c_fair_peek constant integer := 64;
BEGIN
    PERFORM queen.shards_check_v1(p_fn, p_shards);
    IF p_now IS NULL OR p_max_rows IS NULL OR p_max_rows <= 0 OR p_per_tenant IS NULL OR p_per_tenant <= 0 THEN
        RAISE EXCEPTION '%: now must be given and max_rows, per_tenant must be > 0 (got %, %, %)',
            p_fn, p_now, p_max_rows, p_per_tenant USING ERRCODE = '22023';
    END IF;
    IF p_fair_tenants IS NULL OR p_fair_tenants < 0 THEN
        RAISE EXCEPTION '%: fair_tenants must be >= 0 (got %)', p_fn, p_fair_tenants USING ERRCODE = '22023';
    END IF;
    IF (p_max_bytes IS NOT NULL AND p_max_bytes <= 0) OR p_row_overhead IS NULL OR p_row_overhead < 0 THEN
        RAISE EXCEPTION '%: max_bytes must be NULL or > 0 and row_overhead >= 0 (got %, %)',
            p_fn, p_max_bytes, p_row_overhead USING ERRCODE = '22023';
    END IF;

    IF p_fair_tenants > 0
       AND queen.log_timers_due_upto_v1(p_shards, p_now, p_floors, p_max_rows + 1) > p_max_rows THEN
        -- Tenants after the cursor, then from the start (wrapping), by a loose scan of the key.
        WITH RECURSIVE after_cursor AS (
            SELECT (SELECT min(t.tenant_id) FROM queen.log_timers t WHERE t.tenant_id > coalesce(p_fair_after, '')) AS tenant, 1 AS n
            UNION ALL
            SELECT (SELECT min(t.tenant_id) FROM queen.log_timers t WHERE t.tenant_id > a.tenant), a.n + 1
            FROM after_cursor a WHERE a.tenant IS NOT NULL AND a.n < least(p_fair_tenants, p_max_rows)
        ), from_start AS (
            SELECT (SELECT min(t.tenant_id) FROM queen.log_timers t) AS tenant, 1 AS n
            WHERE p_fair_after IS NOT NULL
            UNION ALL
            SELECT (SELECT min(t.tenant_id) FROM queen.log_timers t WHERE t.tenant_id > f.tenant), f.n + 1
            FROM from_start f
            WHERE f.tenant IS NOT NULL AND f.tenant < p_fair_after AND f.n < least(p_fair_tenants, p_max_rows)
        )
        SELECT array_agg(v.tenant ORDER BY v.part, v.n) INTO v_fair_list
        FROM (
            SELECT 1 AS part, a.n, a.tenant FROM after_cursor a WHERE a.tenant IS NOT NULL
            UNION ALL
            SELECT 2, f.n, f.tenant FROM from_start f WHERE f.tenant IS NOT NULL AND f.tenant <= p_fair_after
        ) v;
        v_fair_list := v_fair_list[1:least(p_fair_tenants, p_max_rows)];

        SELECT coalesce(array_agg(x.row_id ORDER BY x.rank), '{}'), coalesce(array_agg(x.tenant_id ORDER BY x.rank), '{}'),
               coalesce(array_agg(x.visible_at ORDER BY x.rank), '{}'), coalesce(array_agg(x.bytes ORDER BY x.rank), '{}'),
               coalesce(array_agg(x.rank ORDER BY x.rank), '{}')
        INTO v_round_ctids, v_round_tenants, v_round_visible, v_round_bytes, v_round_ranks
        FROM unnest(v_fair_list) WITH ORDINALITY AS ft(tenant, rank)
        CROSS JOIN LATERAL (
            SELECT t.ctid AS row_id, t.tenant_id, t.visible_at, ft.rank::integer AS rank,
                   octet_length(t.payload)::bigint + octet_length(t.timer_key) + p_row_overhead AS bytes
            FROM queen.log_timers t
            WHERE t.ctid = (
                    SELECT c.row_id
                    FROM (SELECT p.ctid AS row_id, p.visible_at
                          FROM queen.log_timers p
                          WHERE p.tenant_id = ft.tenant
                          ORDER BY p.queue, p.timer_key
                          LIMIT c_fair_peek) AS c
                    WHERE c.visible_at <= p_now
                    LIMIT 1)
              AND t.visible_at <= p_now
            FOR UPDATE OF t SKIP LOCKED
        ) AS x;
        v_kept := queen.pick_bytes_kept_v1(v_round_bytes, v_total_bytes, p_max_bytes);
        v_ctids := v_round_ctids[1:v_kept];
        v_tenants := v_round_tenants[1:v_kept];
        v_pre_visible := v_round_visible[1:v_kept];
        v_bytes := v_round_bytes[1:v_kept];
        v_fair_ranks := v_round_ranks[1:v_kept];
        v_total_bytes := coalesce((SELECT sum(b) FROM unnest(v_bytes) AS b), 0);
        v_remaining := p_max_rows - cardinality(v_ctids);
        -- The round's rows count toward each tenant's cap.
        IF p_per_tenant <= 1 THEN
            v_capped := v_tenants;
        END IF;
        IF v_kept < cardinality(v_round_ctids) THEN
            v_remaining := 0;  -- the byte cap is reached
        END IF;
    END IF;

    WHILE v_remaining > 0 AND cardinality(v_active) > 0 LOOP
        v_share := ceil(v_remaining::numeric / cardinality(v_active))::integer;
        -- One statement per round: up to v_share rows from each active shard, in shard order,
        -- locked as they are read, stopping once the round has v_remaining rows.
        SELECT coalesce(array_agg(f.row_id), '{}'), coalesce(array_agg(f.tenant_id), '{}'),
               coalesce(array_agg(f.visible_at), '{}'), coalesce(array_agg(f.bytes), '{}'),
               coalesce(array_agg(f.shard), '{}')
        INTO v_round_ctids, v_round_tenants, v_round_visible, v_round_bytes, v_round_shards
        FROM (
            SELECT l.*
            FROM unnest(v_active) AS s(shard)
            CROSS JOIN LATERAL (
                SELECT t.ctid AS row_id, t.tenant_id, t.visible_at, t.shard,
                       octet_length(t.payload)::bigint + octet_length(t.timer_key) + p_row_overhead AS bytes
                FROM queen.log_timers t
                WHERE t.shard = s.shard AND t.visible_at <= p_now
                  AND t.visible_at >= queen.head_floor_v1(p_floors, s.shard)
                  AND t.tenant_id <> ALL (v_capped)
                  -- SKIP LOCKED skips only other transactions' locks: without this, a later
                  -- round would re-read the rows this pick already locked and count them twice.
                  AND t.ctid <> ALL (v_ctids)
                ORDER BY t.visible_at
                LIMIT v_share
                FOR UPDATE OF t SKIP LOCKED
            ) AS l
            LIMIT v_remaining
        ) AS f;
        EXIT WHEN cardinality(v_round_ctids) = 0;

        IF p_per_tenant < p_max_rows THEN
            -- A row is kept while its tenant's count (earlier rounds, then this round in order)
            -- stays within the cap; rows over it were locked by the round's statement but are
            -- not taken. When the cap cannot bind (per_tenant >= max_rows: no pick takes more
            -- than max_rows) the count is skipped (2 of 19 ms of a 200-row claim).
            WITH prior AS (
                SELECT x AS tenant, count(*) AS n FROM unnest(v_tenants) AS x GROUP BY x
            )
            SELECT coalesce(array_agg(r.row_id ORDER BY r.ord), '{}'), coalesce(array_agg(r.tenant ORDER BY r.ord), '{}'),
                   coalesce(array_agg(r.visible ORDER BY r.ord), '{}'), coalesce(array_agg(r.bytes ORDER BY r.ord), '{}')
            INTO v_round_ctids, v_round_tenants, v_round_visible, v_round_bytes
            FROM (
                SELECT u.*, count(*) OVER (PARTITION BY u.tenant ORDER BY u.ord) + coalesce(p.n, 0) AS nth
                FROM unnest(v_round_ctids, v_round_tenants, v_round_visible, v_round_bytes)
                     WITH ORDINALITY AS u(row_id, tenant, visible, bytes, ord)
                LEFT JOIN prior p ON p.tenant = u.tenant
                WHERE u.tenant <> ALL (v_capped)
            ) AS r
            WHERE r.nth <= p_per_tenant;
        END IF;
        v_kept := queen.pick_bytes_kept_v1(v_round_bytes, v_total_bytes, p_max_bytes);
        v_ctids := v_ctids || v_round_ctids[1:v_kept];
        v_tenants := v_tenants || v_round_tenants[1:v_kept];
        v_pre_visible := v_pre_visible || v_round_visible[1:v_kept];
        v_bytes := v_bytes || v_round_bytes[1:v_kept];
        v_fair_ranks := v_fair_ranks || array_fill(NULL::integer, ARRAY[v_kept]);
        v_total_bytes := v_total_bytes + coalesce((SELECT sum(b) FROM unnest(v_round_bytes[1:v_kept]) AS b), 0);
        -- A row left out by the byte cap ends the pick: the next row would cross it.
        EXIT WHEN v_kept < cardinality(v_round_ctids);
        IF p_per_tenant < p_max_rows THEN
            SELECT v_capped || coalesce(array_agg(c.tenant), '{}') INTO v_capped
            FROM (SELECT x AS tenant FROM unnest(v_tenants) AS x
                  GROUP BY x HAVING count(*) >= p_per_tenant) AS c
            WHERE c.tenant <> ALL (v_capped);
        END IF;
        v_remaining := p_max_rows - cardinality(v_ctids);
        EXIT WHEN v_remaining = 0;
        -- Shards that gave their whole share may have more; so may the shards after the last
        -- one the round read, which its LIMIT never reached (rows over a tenant's cap filled
        -- it). The shards it read that gave less are drained for now.
        SELECT coalesce(array_agg(full_shard.shard ORDER BY full_shard.first_seen), '{}') INTO v_next_active
        FROM (SELECT g.shard, min(g.ord) AS first_seen
              FROM unnest(v_round_shards) WITH ORDINALITY AS g(shard, ord)
              GROUP BY g.shard
              HAVING count(*) >= v_share) AS full_shard;
        v_next_active := v_next_active || v_active[
            coalesce((SELECT max(array_position(v_active, x)) FROM unnest(v_round_shards) AS x), 0) + 1 :];
        v_active := v_next_active;
    END LOOP;

    RETURN QUERY
    SELECT u.row_id, u.tenant, u.visible, u.bytes, u.rank, v_fair_list[cardinality(v_fair_list)]
    FROM unnest(v_ctids, v_tenants, v_pre_visible, v_bytes, v_fair_ranks) AS u(row_id, tenant, visible, bytes, rank);
END;
$$;

-- How many of a round's rows (in order) fit the byte cap on top of p_total bytes already taken:
-- the longest prefix whose running sum stays within p_max_bytes (all of them when there is no
-- cap), and at least one when nothing was taken yet (a row bigger than the cap goes alone).
CREATE OR REPLACE FUNCTION queen.pick_bytes_kept_v1(p_bytes bigint[], p_total bigint, p_max_bytes bigint)
RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN p_max_bytes IS NULL THEN coalesce(cardinality(p_bytes), 0)
        ELSE greatest(
            (SELECT count(*)::integer
             FROM (SELECT sum(b) OVER (ORDER BY ord) AS running
                   FROM unnest(p_bytes) WITH ORDINALITY AS u(b, ord)) AS r
             WHERE p_total + r.running <= p_max_bytes),
            CASE WHEN p_total = 0 AND coalesce(cardinality(p_bytes), 0) > 0 THEN 1 ELSE 0 END)
    END
$$;

-- CLAIM: picks up to p_max_rows due rows nobody holds (queen.log_timers_pick_v1: the fairness
-- round, the shard rounds, the per-tenant cap), sets claimed_until = p_now + lease and a fresh
-- random claim_token per row, and returns them ordered by their pre-claim visible_at. The leased
-- path: the rows outlive this transaction, proven by their tokens until the fire.

-- The signature without the fairness round, from before it existed.
DROP FUNCTION IF EXISTS queen.log_timers_claim_v1(integer[], timestamptz, integer, integer, integer);
-- The signature without the head floors.
DROP FUNCTION IF EXISTS queen.log_timers_claim_v1(integer[], timestamptz, integer, integer, integer, integer, text);

CREATE OR REPLACE FUNCTION queen.log_timers_claim_v1(
    p_shards integer[],
    p_now timestamptz,
    p_lease_ms integer,
    p_max_rows integer,
    p_per_tenant integer,
    p_fair_tenants integer DEFAULT 0,
    p_fair_after text DEFAULT NULL,
    p_floors bigint[] DEFAULT NULL
) RETURNS TABLE (
    tenant_id text,
    queue text,
    timer_key text,
    partition text,
    deliver_at timestamptz,
    visible_at timestamptz,
    txn text,
    message_id uuid,
    payload bytea,
    attempts integer,
    claim_token uuid,
    late_ms bigint,
    fair_rank integer,
    fair_next text
)
LANGUAGE plpgsql
SET enable_seqscan = off  -- see queen.log_append_v1: no plan cached on a small table may scan a big one
-- plan_cache_mode = force_custom_plan, here and on the fire, the fail and the DLQ (the leased
-- path, called once per batch): their statements join the batch's own arrays against log_timers,
-- and a generic plan cached while the table was small looked rows up by the primary key's
-- (tenant_id, queue) prefix and filtered the queue's whole backlog: a claim and its fire read
-- 100 000-200 000 rows for 200 timers with 100 000 pending (sweeper/tests/plans_pg.rs,
-- 2026-12-04). A plan made for the call's values and the table's current size does not.
SET plan_cache_mode = force_custom_plan
SET jit = off  -- see queen.log_append_v1: JIT costs far more than it saves here
AS $$
#variable_conflict use_column
BEGIN
    IF p_lease_ms IS NULL OR p_lease_ms <= 0 THEN
        RAISE EXCEPTION 'log_timers_claim_v1: lease_ms must be > 0 (got %)', p_lease_ms USING ERRCODE = '22023';
    END IF;
    -- The rows are updated by address, each carrying its pre-claim visibility and fairness rank
    -- along (a TID scan per row, no join back on the key afterwards).
    RETURN QUERY
    WITH picked AS MATERIALIZED (
        SELECT * FROM queen.log_timers_pick_v1('log_timers_claim_v1', p_shards, p_now, p_max_rows,
                                              p_per_tenant, p_fair_tenants, p_fair_after,
                                              p_floors => p_floors)
    ), claimed AS (
        UPDATE queen.log_timers t
        SET claimed_until = p_now + make_interval(secs => p_lease_ms / 1000.0),
            claim_token = gen_random_uuid()
        FROM picked p
        WHERE t.ctid = p.row_id
        RETURNING t.tenant_id, t.queue, t.timer_key, t.partition, t.deliver_at, p.pre_visible,
                  t.txn, t.message_id, t.payload, t.attempts, t.claim_token, p.fair_rank, p.fair_next
    )
    SELECT c.tenant_id, c.queue, c.timer_key, c.partition, c.deliver_at, c.pre_visible,
           c.txn, c.message_id, c.payload, c.attempts, c.claim_token,
           greatest(0, floor(extract(epoch FROM p_now - c.deliver_at) * 1000))::bigint,
           c.fair_rank, c.fair_next
    FROM claimed c
    ORDER BY c.pre_visible, c.tenant_id, c.queue, c.timer_key;
END;
$$;
