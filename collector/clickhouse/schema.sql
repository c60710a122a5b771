-- dta: the ClickHouse tables `dta-collector export` writes (one ClickHouse server).
--
--   clickhouse-client --query "CREATE DATABASE IF NOT EXISTS dta"
--   clickhouse-client --database dta --multiquery < collector/clickhouse/schema.sql
--
-- The exporter runs these statements itself at start when [export.clickhouse] create_tables
-- is true (the default). For a cluster see schema-cluster.sql.
--
-- Every table is a ReplacingMergeTree whose ORDER BY is the row's identity: a row the
-- exporter ever inserted twice (it never should, see collector/README.md "Exactly once") is
-- collapsed by the next merge, and `FINAL` (or GROUP BY on the key) hides it before that.
-- ClickHouse 18.16 or newer (no LowCardinality, no DateTime64, no TTL needed).

-- Append entries (loss and congestion events): one row per entry. (store, list, generation,
-- seq, idx) is the entry's place in the collector: generation counts restarts of the list's
-- ring at batch 1, seq is the batch's sequence number, idx the entry's index in its batch.
-- entry holds the entry's raw bytes (hex(entry) shows them). No PARTITION BY: duplicates
-- can only be collapsed within one partition, and the identity has no time in it.
CREATE TABLE IF NOT EXISTS append_entries (
    store String,
    list UInt32,
    generation UInt32,
    seq UInt64,
    idx UInt16,
    entry String,
    exported_at DateTime
) ENGINE = ReplacingMergeTree()
ORDER BY (store, list, generation, seq, idx);

-- Key-Increment counters of the active keys, every snapshot_secs: the count-min estimate in
-- the store's current epoch. snapshot_time is aligned to snapshot_secs (the values are read
-- in the seconds after it).
CREATE TABLE IF NOT EXISTS counter_snapshots (
    snapshot_time DateTime,
    store String,
    key String,
    epoch UInt64,
    estimate UInt64
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(snapshot_time)
ORDER BY (store, key, snapshot_time);

-- Key-Write answers of the active keys: result is value, empty or conflict; value holds the
-- stored bytes (hex(value)); votes and matches as the query engine counts them.
CREATE TABLE IF NOT EXISTS keywrite_snapshots (
    snapshot_time DateTime,
    store String,
    key String,
    result String,
    value String,
    votes UInt8,
    matches UInt8
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(snapshot_time)
ORDER BY (store, key, snapshot_time);

-- Merged sketches (Count-Min, Count): point estimates of the active keys in the newest epoch.
CREATE TABLE IF NOT EXISTS sketch_points (
    snapshot_time DateTime,
    store String,
    epoch UInt32,
    key String,
    estimate Int64
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(snapshot_time)
ORDER BY (store, epoch, key, snapshot_time);

-- Merged sketches, one row per store and snapshot: the newest epoch's completeness and, for
-- HyperLogLog, the cardinality estimate (0 for the other kinds).
CREATE TABLE IF NOT EXISTS sketch_epochs (
    snapshot_time DateTime,
    store String,
    epoch UInt32,
    kind String,
    cardinality Float64,
    columns UInt32,
    written UInt32,
    complete UInt32,
    ratio Float64
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(snapshot_time)
ORDER BY (store, epoch, snapshot_time);

-- ZERO mode ([pull]): the newest snapshot of every block of every agent, every snapshot_secs,
-- one row per value (idx: its place in the block; seq: the block's sequence word, 2 x the
-- agent's updates). Counters' rates come from two snapshot_times.
CREATE TABLE IF NOT EXISTS pulled_metrics (
    snapshot_time DateTime,
    agent String,
    block String,
    idx UInt16,
    seq UInt64,
    value UInt64
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(snapshot_time)
ORDER BY (agent, block, idx, snapshot_time);
