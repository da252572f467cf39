-- Queen: per-tenant KV quota, checked against the usage rollup.
--
-- kv_usage is written by the sweeper's rollup (030_kv_sweeper.sql) on its slow gate, so the quota
-- is approximate by design: a tenant can overshoot by what it writes between two rollups. That is
-- the trade the seed makes: the rollup is precision, not delivery, and it is the second thing the
-- sweeper sheds under pressure. With the rollup switched off, kv_usage stops moving and the quota
-- keeps answering from the last numbers.

CREATE TABLE IF NOT EXISTS queen.kv_quota (
    tenant_id  text        PRIMARY KEY,
    max_rows   bigint,
    max_bytes  bigint,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT kv_quota_limits_positive CHECK (coalesce(max_rows, 1) > 0 AND coalesce(max_bytes, 1) > 0)
);

-- One row per tenant that has, or had, rows. A tenant whose rows all expired or fired is written
-- as zeros by the rollup, never left with its last non-zero numbers.
CREATE TABLE IF NOT EXISTS queen.kv_usage (
    tenant_id   text        PRIMARY KEY,
    kv_rows     bigint      NOT NULL,
    kv_bytes    bigint      NOT NULL,
    timer_rows  bigint      NOT NULL,
    timer_bytes bigint      NOT NULL,
    measured_at timestamptz NOT NULL
);

-- Raises 54000 when the tenant's last measured usage is at or over a limit. No quota row, or no
-- usage row yet, means no limit.
CREATE OR REPLACE FUNCTION queen.kv_quota_check_v1(p_tenant text)
RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_quota queen.kv_quota%ROWTYPE;
    v_usage queen.kv_usage%ROWTYPE;
BEGIN
    SELECT * INTO v_quota FROM queen.kv_quota WHERE tenant_id = p_tenant;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT * INTO v_usage FROM queen.kv_usage WHERE tenant_id = p_tenant;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_usage.kv_rows >= v_quota.max_rows THEN
        RAISE EXCEPTION 'kv quota: tenant % has % rows, its limit is %', p_tenant, v_usage.kv_rows, v_quota.max_rows
            USING ERRCODE = '54000';
    END IF;
    IF v_usage.kv_bytes >= v_quota.max_bytes THEN
        RAISE EXCEPTION 'kv quota: tenant % has % bytes, its limit is %', p_tenant, v_usage.kv_bytes, v_quota.max_bytes
            USING ERRCODE = '54000';
    END IF;
END;
$$;
