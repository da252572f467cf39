-- The soak's record of what each timer was promised: its txn and delivery instant. Unlogged: it
-- is measurement, not data, and must not add to the WAL being measured.
CREATE UNLOGGED TABLE IF NOT EXISTS soak_expected (
    txn        text PRIMARY KEY,
    deliver_at timestamptz NOT NULL
);
