-- demo.daily_route_delays, version 2 (the rebuild example): the whole table from demo.flights with a new
-- column, diverted (BIGINT: flights that departed but have no arrival delay recorded). No range parameters:
-- a rebuild re-creates every partition.
SELECT
    flight_date,
    origin,
    dest,
    carrier,
    count(*)                                             AS flights,
    count_if(dep_time IS NULL)                           AS cancelled,
    count_if(dep_time IS NOT NULL AND arr_delay IS NULL) AS diverted,
    avg(arr_delay)                                       AS mean_arr_delay_min,
    sum(arr_delay)                                       AS total_arr_delay_min
FROM demo.flights
GROUP BY flight_date, origin, dest, carrier
