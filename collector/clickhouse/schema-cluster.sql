-- dta on a ClickHouse cluster: replicated shards behind Distributed tables with the names the
-- exporter writes (schema.sql's tables, same columns). Replace `dta_cluster` with the cluster
-- of <remote_servers>; the {shard} and {replica} macros and ZooKeeper come from the servers'
-- configuration. Run once, on any node:
--
--   clickhouse-client --multiquery < collector/clickhouse/schema-cluster.sql
--
-- and set [export.clickhouse] create_tables = false. Give the exporter's user the profile
-- setting insert_distributed_sync = 1, so that ClickHouse acknowledges an INSERT only when
-- the shard holds its rows (the exactly-once argument needs the acknowledgement to mean
-- that; collector/README.md). Each list's rows go to one shard (sharding key store, list), so
-- the exporter's max(seq) question reads one shard's answer per list.

CREATE DATABASE IF NOT EXISTS dta ON CLUSTER dta_cluster;

CREATE TABLE IF NOT EXISTS dta.append_entries_local ON CLUSTER dta_cluster (
    store String,
    list UInt32,
    generation UInt32,
    seq UInt64,
    idx UInt16,
    entry String,
    exported_at DateTime
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/dta/append_entries', '{replica}')
ORDER BY (store, list, generation, seq, idx);

CREATE TABLE IF NOT EXISTS dta.append_entries ON CLUSTER dta_cluster AS dta.append_entries_local
ENGINE = Distributed(dta_cluster, dta, append_entries_local, cityHash64(store, list));

CREATE TABLE IF NOT EXISTS dta.counter_snapshots_local ON CLUSTER dta_cluster (
    snapshot_time DateTime,
    store String,
    key String,
    epoch UInt64,
    estimate UInt64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/dta/counter_snapshots', '{replica}')
PARTITION BY toYYYYMM(snapshot_time)
ORDER BY (store, key, snapshot_time);

CREATE TABLE IF NOT EXISTS dta.counter_snapshots ON CLUSTER dta_cluster AS dta.counter_snapshots_local
ENGINE = Distributed(dta_cluster, dta, counter_snapshots_local, cityHash64(store, key));

CREATE TABLE IF NOT EXISTS dta.keywrite_snapshots_local ON CLUSTER dta_cluster (
    snapshot_time DateTime,
    store String,
    key String,
    result String,
    value String,
    votes UInt8,
    matches UInt8
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/dta/keywrite_snapshots', '{replica}')
PARTITION BY toYYYYMM(snapshot_time)
ORDER BY (store, key, snapshot_time);

CREATE TABLE IF NOT EXISTS dta.keywrite_snapshots ON CLUSTER dta_cluster AS dta.keywrite_snapshots_local
ENGINE = Distributed(dta_cluster, dta, keywrite_snapshots_local, cityHash64(store, key));

CREATE TABLE IF NOT EXISTS dta.sketch_points_local ON CLUSTER dta_cluster (
    snapshot_time DateTime,
    store String,
    epoch UInt32,
    key String,
    estimate Int64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/dta/sketch_points', '{replica}')
PARTITION BY toYYYYMM(snapshot_time)
ORDER BY (store, epoch, key, snapshot_time);

CREATE TABLE IF NOT EXISTS dta.sketch_points ON CLUSTER dta_cluster AS dta.sketch_points_local
ENGINE = Distributed(dta_cluster, dta, sketch_points_local, cityHash64(store, key));

CREATE TABLE IF NOT EXISTS dta.sketch_epochs_local ON CLUSTER dta_cluster (
    snapshot_time DateTime,
    store String,
    epoch UInt32,
    kind String,
    cardinality Float64,
    columns UInt32,
    written UInt32,
    complete UInt32,
    ratio Float64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/dta/sketch_epochs', '{replica}')
PARTITION BY toYYYYMM(snapshot_time)
ORDER BY (store, epoch, snapshot_time);

CREATE TABLE IF NOT EXISTS dta.sketch_epochs ON CLUSTER dta_cluster AS dta.sketch_epochs_local
ENGINE = Distributed(dta_cluster, dta, sketch_epochs_local, cityHash64(store));

CREATE TABLE IF NOT EXISTS dta.pulled_metrics_local ON CLUSTER dta_cluster (
    snapshot_time DateTime,
    agent String,
    block String,
    idx UInt16,
    seq UInt64,
    value UInt64
) ENGINE = ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/dta/pulled_metrics', '{replica}')
PARTITION BY toYYYYMM(snapshot_time)
ORDER BY (agent, block, idx, snapshot_time);

CREATE TABLE IF NOT EXISTS dta.pulled_metrics ON CLUSTER dta_cluster AS dta.pulled_metrics_local
ENGINE = Distributed(dta_cluster, dta, pulled_metrics_local, cityHash64(agent, block));
