-- The reports of `tsubame report` over every node's events in ClickHouse
-- (schema.sql). Replace {from}, {to} (UTC, 'YYYY-MM-DD hh:mm:ss') and
-- {tz}. Amounts are sums of CPMs in micro-units, i.e. thousandths of a
-- micro-unit of spend: divide by 1e9 for units (exact in Decimal).
-- requests are ad requests' slots, filled or not: they have no line item,
-- so they are the line_item '' row's.

-- Delivery and spend by day (in {tz}) and line item: tsubame report -by day,line_item -tz {tz}
SELECT
    toDate(time, '{tz}') AS day,
    line_item,
    currency,
    sumIf(slots, event = 'request') AS requests,
    countIf(event = 'decision') AS decisions,
    countIf(event IN ('imp', 'bill') AND valid = 1 AND late = 0) AS impressions,
    countIf(event = 'click' AND valid = 1) AS clicks,
    sumIf(price, event IN ('imp', 'bill') AND valid = 1 AND late = 0) AS spend_thousandths_of_micros,
    countIf(event = 'bid' AND valid = 1) AS bids,
    countIf(event = 'win' AND valid = 1) AS wins,
    countIf(event = 'loss' AND valid = 1) AS losses,
    countIf(event = 'bill' AND valid = 1 AND late = 0) AS bills,
    countIf(event IN ('imp', 'bill') AND valid = 1 AND late = 1) AS overage
FROM tsubame.events FINAL
WHERE time >= toDateTime('{from}', 'UTC') AND time < toDateTime('{to}', 'UTC')
GROUP BY day, line_item, currency
ORDER BY day, line_item, currency;
