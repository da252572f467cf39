-- Queen: process-wide switches mirrored in the database, so every broker and every operator sees
-- the same answer. The sweeper keeps an in-process copy (sweeper/src/switches.rs) and refreshes it.
--
--   timers_schedule_enabled  false: new schedules are refused, cancels still work. Harmless and
--                            instant to stop.
--   timers_fire_enabled      false: the fire stops; the probe keeps running read-only so the
--                            backlog gauge stays true. Stopping it accumulates promised work.

CREATE TABLE IF NOT EXISTS queen.system_state (
    key        text        PRIMARY KEY,
    value      jsonb       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Seeds the defaults once; an operator's later choice survives every re-apply of this file.
INSERT INTO queen.system_state (key, value) VALUES
    ('timers_schedule_enabled', 'true'),
    ('timers_fire_enabled', 'true')
ON CONFLICT (key) DO NOTHING;

CREATE OR REPLACE FUNCTION queen.system_state_get_v1(p_key text)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT value FROM queen.system_state WHERE key = p_key
$$;

CREATE OR REPLACE FUNCTION queen.system_state_set_v1(p_key text, p_value jsonb, p_now timestamptz)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(p_key, '') = '' OR p_value IS NULL OR p_now IS NULL THEN
        RAISE EXCEPTION 'system_state_set_v1: key, value and now must be given' USING ERRCODE = '22023';
    END IF;
    INSERT INTO queen.system_state (key, value, updated_at) VALUES (p_key, p_value, p_now)
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at;
END;
$$;
