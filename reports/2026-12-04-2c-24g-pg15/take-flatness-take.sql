SELECT count(*) FROM queen.log_timers_take_v1(ARRAY(SELECT generate_series(0,63)), now(), 200, 200, 32, NULL, 1048576, 300);
