-- The demo's initial, defective build of demo.daily_route_delays (used by `backfill demo` only).
-- THE DEFECT, deliberate and documented: for flights scheduled before 2013-04-01 the arrival-delay columns were
-- computed from dep_delay (departure delay) instead of arr_delay. Rows from April on are correct.
-- conf/backfills/fix_daily_route_delays.yml repairs January to March with conf/sql/daily_route_delays.sql.
SELECT
    flight_date,
    origin,
    dest,
    carrier,
    count(*)                    AS flights,
    count_if(dep_time IS NULL)  AS cancelled,
    avg(CASE WHEN flight_date < DATE'2013-04-01' THEN dep_delay ELSE arr_delay END) AS mean_arr_delay_min,
    sum(CASE WHEN flight_date < DATE'2013-04-01' THEN dep_delay ELSE arr_delay END) AS total_arr_delay_min
FROM demo.flights
GROUP BY flight_date, origin, dest, carrier
