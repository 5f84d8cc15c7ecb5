-- Corrected rows of demo.daily_route_delays for flights from JFK only (the patch example): same logic as
-- daily_route_delays.sql, limited to one origin. :range_start / :range_end are half-open DATE bounds.
SELECT
    flight_date,
    origin,
    dest,
    carrier,
    count(*)                    AS flights,
    count_if(dep_time IS NULL)  AS cancelled,
    avg(arr_delay)              AS mean_arr_delay_min,
    sum(arr_delay)              AS total_arr_delay_min
FROM demo.flights
WHERE flight_date >= :range_start AND flight_date < :range_end AND origin = 'JFK'
GROUP BY flight_date, origin, dest, carrier
