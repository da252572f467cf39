-- Heap and index sizes of the hot tables, and the live timer rows (the statistics collector's
-- count: a count(*) would scan a million rows every sample).
SELECT pg_table_size('queen.log_timers'),
       pg_indexes_size('queen.log_timers'),
       pg_table_size('queen.kv'),
       pg_indexes_size('queen.kv'),
       pg_table_size('queen.log_messages'),
       coalesce((SELECT n_live_tup FROM pg_stat_user_tables WHERE schemaname = 'queen' AND relname = 'log_timers'), 0),
       coalesce((SELECT n_tup_hot_upd FROM pg_stat_user_tables WHERE schemaname = 'queen' AND relname = 'log_timers'), 0),
       coalesce((SELECT n_dead_tup FROM pg_stat_user_tables WHERE schemaname = 'queen' AND relname = 'log_timers'), 0)
