-- demo.monthly_route_delays, a downstream mart of demo.daily_route_delays: one row per (month, origin, dest,
-- carrier). month is the first day of the New York month (DATE). Delays are in minutes.
-- :range_start / :range_end are the half-open bounds of the months being staged (DATE values, first days).
SELECT
    trunc(flight_date, 'MM')  AS month,
    origin,
    dest,
    carrier,
    sum(flights)              AS flights,
    sum(cancelled)            AS cancelled,
    sum(total_arr_delay_min)  AS total_arr_delay_min
FROM demo.daily_route_delays
WHERE flight_date >= :range_start AND flight_date < :range_end
GROUP BY trunc(flight_date, 'MM'), origin, dest, carrier
