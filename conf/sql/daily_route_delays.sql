-- demo.daily_route_delays, one row per (flight_date, origin, dest, carrier), derived from demo.flights.
-- flight_date: New York local date of the scheduled departure. Delays are in minutes; the mean and total
-- cover flights with a recorded arrival delay (cancelled and diverted flights have none).
-- :range_start / :range_end are the half-open bounds of the partitions being staged (DATE values).
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
WHERE flight_date >= :range_start AND flight_date < :range_end
GROUP BY flight_date, origin, dest, carrier
