-- Tsubame's access log in ClickHouse: the events of every node, read from
-- the Kafka topic the servers ship their access log to, kept once each.
-- Replace {kafka_brokers} and {kafka_topic} (access_log.kafka.brokers and
-- .topic), then run: clickhouse-client --multiquery < schema.sql
-- The servers must write JSON lines (access_log.format: json), and the
-- ClickHouse profile that reads the topic must skip the fields the table
-- does not keep (input_format_skip_unknown_fields = 1): a request's own
-- line has them. Set <kafka><auto_offset_reset>smallest</auto_offset_reset>
-- </kafka> in the server's config.xml so that the new consumer group reads
-- the topic from its start (librdkafka's default is its end: what the
-- servers shipped before the group joined would be skipped). Tested with ClickHouse 18.16 (Debian's package); the
-- statements use nothing later releases dropped.

CREATE DATABASE IF NOT EXISTS tsubame;

-- The events, deduplicated: a line shipped twice (Kafka's at-least-once,
-- a shipper's resend after a crash) has the same event_id and time, and
-- so do an impression's repeats; of the rows with one event_id the one
-- kept is the valid one (the version column). Read with FINAL for exact
-- counts before ClickHouse has merged the parts. slots and filled are a
-- request line's (event 'request': an ad request's slots asked and filled),
-- 0 on the other events.
CREATE TABLE IF NOT EXISTS tsubame.events (
    time DateTime('UTC'),
    event String,
    event_id String,
    decision String,
    line_item String,
    campaign String,
    creative String,
    placement String,
    uid String,
    price Int64,
    currency String,
    valid UInt8,
    late UInt8,
    test UInt8,
    reason String,
    advertiser String,
    site String,
    country String,
    device String,
    exchange String,
    seat String,
    auction String,
    imp String,
    deal String,
    publisher String,
    slots UInt16,
    filled UInt16
) ENGINE = ReplacingMergeTree(valid)
PARTITION BY toYYYYMM(time)
ORDER BY (event_id);

-- Refused tracking and notice requests (expired, tampered, not ours): the
-- reports' "rejected", which have no event line.
CREATE TABLE IF NOT EXISTS tsubame.rejected (
    time DateTime('UTC'),
    endpoint String,
    status UInt16
) ENGINE = MergeTree()
PARTITION BY toYYYYMM(time)
ORDER BY (time);

-- The topic is read by two Kafka tables, one for each table above, in
-- consumer groups of their own. A Kafka table starts its consumer with its
-- first view, and a read under way feeds only the views there were when it
-- began: one table read by two views could send a line to the events and
-- not to the refused requests while the second view was being made. With
-- one view each, every line reaches both. The request lines, most of the
-- topic, are read twice; the refused requests' table parses four fields.

-- Every line of the topic, request lines too (their event is ''), for the
-- events, in a group of its own. Added to a schema of an earlier release
-- (one Kafka table, in the group tsubame-clickhouse), it reads the topic
-- from its start again, and the events table keeps one row per event_id.
CREATE TABLE IF NOT EXISTS tsubame.events_kafka (
    time String,
    event String,
    event_id String,
    decision String,
    line_item String,
    campaign String,
    creative String,
    placement String,
    uid String,
    price Int64,
    currency String,
    valid UInt8,
    advertiser String,
    site String,
    country String,
    device String,
    exchange String,
    seat String,
    auction String,
    imp String,
    deal String,
    publisher String,
    reason String,
    late UInt8,
    test UInt8,
    slots UInt16,
    filled UInt16
) ENGINE = Kafka('{kafka_brokers}', '{kafka_topic}', 'tsubame-clickhouse-events', 'JSONEachRow');

CREATE MATERIALIZED VIEW IF NOT EXISTS tsubame.events_from_kafka TO tsubame.events AS
SELECT parseDateTimeBestEffort(time) AS time, event, event_id, decision, line_item, campaign, creative, placement, uid,
       price, currency, valid, late, test, reason, advertiser, site, country, device, exchange, seat, auction, imp,
       deal, publisher, slots, filled
FROM tsubame.events_kafka
WHERE event != '';

-- Every line again, for the refused requests, in the group that read the
-- topic before: made on an earlier schema, it reads on from where that
-- schema's table stopped, and no refused request is stored twice.
CREATE TABLE IF NOT EXISTS tsubame.rejected_kafka (
    time String,
    event String,
    endpoint String,
    status UInt16
) ENGINE = Kafka('{kafka_brokers}', '{kafka_topic}', 'tsubame-clickhouse', 'JSONEachRow');

CREATE MATERIALIZED VIEW IF NOT EXISTS tsubame.rejected_from_kafka TO tsubame.rejected AS
SELECT parseDateTimeBestEffort(time) AS time, endpoint, status
FROM tsubame.rejected_kafka
WHERE event = '' AND endpoint IN ('track_imp', 'track_click', 'rtb_win', 'rtb_bill', 'rtb_loss', 'rtb_bid_imp') AND status >= 400 AND status < 500;
