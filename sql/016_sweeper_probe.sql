-- Queen: the sweeper's one call a pass when idle. PROBE plus what the rest of the pass needs to
-- decide whether to run, so an idle broker costs one statement a second and keeps the one-second
-- cross-broker bound:
--   the timers' probe (queen.log_timers_due_v1): {nextInMs, due, dueCapped, lateMs};
--   the kill switches: {scheduleEnabled, fireEnabled} (a missing or malformed row means on: a
--   switch is an operator's explicit act);
--   with p_kv_cap > 0, the prune's alarm (queen.kv_expired_v1): {kvExpired, kvExpiredCapped,
--   kvLagMs}, so the prune runs only when something is expired and the alarm is fresh on every
--   pass, shed or not.
-- The KV part lives in 030_kv_sweeper.sql, which a broker must be able to run without: when it is
-- missing, this call fails with SQLSTATE class 42 and the sweeper switches the prune off and
-- probes again with p_kv_cap = 0, which never calls it.
-- A switch's stored value: on unless it is the JSON boolean false.
CREATE OR REPLACE FUNCTION queen.switch_on_v1(p_value jsonb)
RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT p_value IS DISTINCT FROM 'false'::jsonb
$$;

-- p_floors and p_floor_margin_ms are the timers' head floors (011_timers_probe_claim.sql): the
-- floors to read from, and the margin of the next ones (NULL: read from the start, hand none back).
DROP FUNCTION IF EXISTS queen.sweeper_probe_v1(integer[], timestamptz, integer, integer);

CREATE OR REPLACE FUNCTION queen.sweeper_probe_v1(
    p_shards integer[], p_now timestamptz, p_due_cap integer, p_kv_cap integer,
    p_floors bigint[] DEFAULT NULL, p_floor_margin_ms integer DEFAULT NULL
) RETURNS jsonb
LANGUAGE plpgsql STABLE
SET enable_seqscan = off  -- see queen.log_append_v1: no plan cached on a small table may scan a big one
SET jit = off  -- see queen.log_append_v1: JIT costs far more than it saves here
AS $$
DECLARE
    v_probe jsonb;
    v_kv jsonb;
BEGIN
    IF p_kv_cap IS NULL OR p_kv_cap < 0 THEN
        RAISE EXCEPTION 'sweeper_probe_v1: kv_cap must be >= 0 (got %)', p_kv_cap USING ERRCODE = '22023';
    END IF;
    v_probe := queen.log_timers_due_v1(p_shards, p_now, p_due_cap, p_floors, p_floor_margin_ms) || jsonb_build_object(
        'scheduleEnabled', queen.switch_on_v1(queen.system_state_get_v1('timers_schedule_enabled')),
        'fireEnabled', queen.switch_on_v1(queen.system_state_get_v1('timers_fire_enabled')));
    IF p_kv_cap > 0 THEN
        v_kv := queen.kv_expired_v1(p_shards, p_now, p_kv_cap);
        v_probe := v_probe || jsonb_build_object(
            'kvExpired', v_kv->'expired',
            'kvExpiredCapped', v_kv->'expiredCapped',
            'kvLagMs', v_kv->'lagMs');
    END IF;
    RETURN v_probe;
END;
$$;
