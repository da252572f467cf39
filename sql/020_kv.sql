-- Queen: the minimal KV surface (put with TTL, get, delete).
--
-- An expired row is dead from the first read after its instant: kv_live_v1 is the one boundary
-- the readers and the prune share, so a late prune changes no answer, only the table's size.

CREATE TABLE IF NOT EXISTS queen.kv (
    tenant_id   text        NOT NULL,
    namespace   text        NOT NULL,
    key         text        NOT NULL,
    -- The JSON text the client sent, byte for byte (checked as JSON by the put): key order,
    -- number spelling and escapes survive, and "\u0000" is six characters, which jsonb refuses.
    value       text        NOT NULL,
    version     bigint      NOT NULL DEFAULT 1,
    expires_at  timestamptz,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    -- 64 shards, fixed forever, like log_timers: the prune's seeks spread over them.
    shard       integer     GENERATED ALWAYS AS ((hashtextextended(key, 0) & 63)::integer) STORED,
    PRIMARY KEY (tenant_id, namespace, key),
    CONSTRAINT kv_names_not_empty CHECK (tenant_id <> '' AND namespace <> '' AND key <> '')
);

-- A table made while values were jsonb is converted once: the jsonb's text is valid JSON text.
-- The rewrite holds the table's lock for its length, on the first boot of this schema only.
DO $$
BEGIN
    IF (SELECT a.atttypid FROM pg_attribute a
        WHERE a.attrelid = 'queen.kv'::regclass AND a.attname = 'value') = 'jsonb'::regtype THEN
        ALTER TABLE queen.kv ALTER COLUMN value TYPE text USING value::text;
    END IF;
END;
$$;

-- The one secondary index: only rows that can expire, ordered by when they do, per shard.
CREATE INDEX IF NOT EXISTS kv_shard_expires_idx ON queen.kv (shard, expires_at)
    WHERE expires_at IS NOT NULL;

-- [not measured] kv fillfactor = 90: leaves room for an overwrite of the same key; a guess.
-- vacuum_truncate = off: the heap never gives pages back, so the table's peak is permanent. That
-- is why the prune publishes expired_not_pruned on every pass: an unpruned table is a failure
-- that looks like health.
ALTER TABLE queen.kv SET (fillfactor = 90, vacuum_truncate = off);

-- Live means: no expiry, or an expiry strictly after now. A row expiring exactly at now is dead.
CREATE OR REPLACE FUNCTION queen.kv_live_v1(p_expires_at timestamptz, p_now timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_expires_at IS NULL OR p_expires_at > p_now
$$;

CREATE OR REPLACE FUNCTION queen.kv_names_check_v1(p_fn text, p_tenant text, p_namespace text, p_key text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF coalesce(p_tenant, '') = '' OR coalesce(p_namespace, '') = '' OR coalesce(p_key, '') = '' THEN
        RAISE EXCEPTION '%: tenant, namespace and key must be non-empty', p_fn USING ERRCODE = '22023';
    END IF;
END;
$$;

-- PUT: writes p_value, the text of one JSON value, under (tenant, namespace, key), as those very
-- bytes. p_ttl_ms NULL means no expiry, otherwise the row expires p_ttl_ms after p_now. The version
-- counts writes of the live row; a put over a dead (expired, not yet pruned) row starts again at 1,
-- as if the row had been pruned. A put that would create a row for a tenant over its quota raises
-- 54000 (queen.kv_quota_check_v1). Text that is not JSON raises 22P02.
-- Returns {version, expiresAt, created}.
CREATE OR REPLACE FUNCTION queen.kv_put_v2(
    p_tenant text, p_namespace text, p_key text, p_value text, p_ttl_ms bigint, p_now timestamptz
) RETURNS jsonb
LANGUAGE plpgsql
SET enable_seqscan = off  -- see queen.log_append_v1: no plan cached on a small table may scan a big one
AS $$
#variable_conflict use_column
DECLARE
    v_expires_at timestamptz;
    v_version bigint;
    v_created_at timestamptz;
BEGIN
    PERFORM queen.kv_names_check_v1('kv_put_v2', p_tenant, p_namespace, p_key);
    IF p_value IS NULL OR p_now IS NULL THEN
        RAISE EXCEPTION 'kv_put_v2: value and now must be given' USING ERRCODE = '22023';
    END IF;
    -- The json type only checks the syntax and keeps the text: the cast is the check (22P02).
    PERFORM p_value::json;
    IF p_ttl_ms IS NOT NULL AND p_ttl_ms <= 0 THEN
        RAISE EXCEPTION 'kv_put_v2: ttl_ms must be > 0 or NULL for no expiry (got %)', p_ttl_ms
            USING ERRCODE = '22023';
    END IF;
    v_expires_at := p_now + make_interval(secs => p_ttl_ms / 1000.0);

    IF NOT EXISTS (SELECT 1 FROM queen.kv k
                   WHERE k.tenant_id = p_tenant AND k.namespace = p_namespace AND k.key = p_key
                     AND queen.kv_live_v1(k.expires_at, p_now)) THEN
        PERFORM queen.kv_quota_check_v1(p_tenant);
    END IF;

    INSERT INTO queen.kv AS k (tenant_id, namespace, key, value, version, expires_at, created_at, updated_at)
    VALUES (p_tenant, p_namespace, p_key, p_value, 1, v_expires_at, p_now, p_now)
    ON CONFLICT (tenant_id, namespace, key) DO UPDATE
    SET value = EXCLUDED.value,
        version = CASE WHEN queen.kv_live_v1(k.expires_at, p_now) THEN k.version + 1 ELSE 1 END,
        created_at = CASE WHEN queen.kv_live_v1(k.expires_at, p_now) THEN k.created_at ELSE p_now END,
        expires_at = EXCLUDED.expires_at,
        updated_at = p_now
    RETURNING k.version, k.created_at INTO v_version, v_created_at;

    RETURN jsonb_strip_nulls(jsonb_build_object(
        'version', v_version, 'expiresAt', v_expires_at, 'created', v_version = 1));
END;
$$;

-- PUT of a jsonb value, for SQL callers: stored as jsonb's text of it (keys sorted, numbers
-- normalized), through kv_put_v2.
CREATE OR REPLACE FUNCTION queen.kv_put_v1(
    p_tenant text, p_namespace text, p_key text, p_value jsonb, p_ttl_ms bigint, p_now timestamptz
) RETURNS jsonb
LANGUAGE sql AS $$
    SELECT queen.kv_put_v2(p_tenant, p_namespace, p_key, p_value::text, p_ttl_ms, p_now)
$$;

-- GET: the live row's value (its JSON text as put), version and expiry (NULL when it never
-- expires); no row when there is no live one.
CREATE OR REPLACE FUNCTION queen.kv_get_v2(
    p_tenant text, p_namespace text, p_key text, p_now timestamptz
) RETURNS TABLE (value text, version bigint, expires_at timestamptz)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off  -- see queen.log_append_v1: no plan cached on a small table may scan a big one
AS $$
#variable_conflict use_column
BEGIN
    PERFORM queen.kv_names_check_v1('kv_get_v2', p_tenant, p_namespace, p_key);
    RETURN QUERY
    SELECT k.value, k.version, k.expires_at
    FROM queen.kv k
    WHERE k.tenant_id = p_tenant AND k.namespace = p_namespace AND k.key = p_key
      AND queen.kv_live_v1(k.expires_at, p_now);
END;
$$;

-- GET as jsonb, for SQL callers: {value, version, expiresAt} of the live row (expiresAt only when
-- it expires), or NULL. The value goes through jsonb, so a value holding "\u0000" raises 22P05
-- here; kv_get_v2 answers every value.
CREATE OR REPLACE FUNCTION queen.kv_get_v1(
    p_tenant text, p_namespace text, p_key text, p_now timestamptz
) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    -- Not jsonb_strip_nulls: it strips nulls at every depth, including inside the stored value.
    SELECT jsonb_build_object('value', g.value::jsonb, 'version', g.version)
           || CASE WHEN g.expires_at IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('expiresAt', g.expires_at) END
    FROM queen.kv_get_v2(p_tenant, p_namespace, p_key, p_now) AS g
$$;

-- DELETE: removes the row; true when a live row was removed (a dead one is removed too, quietly).
CREATE OR REPLACE FUNCTION queen.kv_delete_v1(
    p_tenant text, p_namespace text, p_key text, p_now timestamptz
) RETURNS boolean
LANGUAGE plpgsql
SET enable_seqscan = off  -- see queen.log_append_v1: no plan cached on a small table may scan a big one
AS $$
#variable_conflict use_column
DECLARE
    v_was_live boolean;
BEGIN
    PERFORM queen.kv_names_check_v1('kv_delete_v1', p_tenant, p_namespace, p_key);
    DELETE FROM queen.kv k
    WHERE k.tenant_id = p_tenant AND k.namespace = p_namespace AND k.key = p_key
    RETURNING queen.kv_live_v1(k.expires_at, p_now) INTO v_was_live;
    RETURN coalesce(v_was_live, false);
END;
$$;
