-- Example queries over the tables of schema.sql (database dta):
--   clickhouse-client -d dta --multiquery < collector/clickhouse/queries.sql
-- FINAL (or GROUP BY on the identity) hides a duplicate before ReplacingMergeTree's merge
-- collapses it; the exporter never inserts one (collector/README.md, "Exactly once").

-- Append entries exported per store and list, and the newest batch of each.
SELECT store, list, count() AS entries, max(seq) AS newest_batch, max(exported_at) AS last_export
FROM append_entries FINAL
GROUP BY store, list
ORDER BY store, list
LIMIT 20;

-- Events per minute over the last hour (loss and congestion events as they were exported).
SELECT toStartOfMinute(exported_at) AS minute, store, count() AS events
FROM append_entries
WHERE exported_at > now() - 3600
GROUP BY minute, store
ORDER BY minute, store;

-- The first 8 bytes of the newest entries of list 0, as hex.
SELECT seq, idx, hex(entry) AS entry, exported_at
FROM append_entries
WHERE store = 'events' AND list = 0
ORDER BY generation DESC, seq DESC, idx DESC
LIMIT 10;

-- Gaps: batches missing between the first and the last exported batch of each list
-- (batches the collector's ring overwrote before they were exported, or never written).
SELECT store, list, generation, max(seq) - min(seq) + 1 - uniqExact(seq) AS missing_batches
FROM append_entries
GROUP BY store, list, generation
HAVING missing_batches > 0;

-- Proof of exactly once: rows and distinct identities agree.
SELECT count() AS rows, uniqExact(store, list, generation, seq, idx) AS identities
FROM append_entries;

-- The ten keys that grew most over the last hour (Key-Increment snapshots, within one epoch).
SELECT store, hex(key) AS key, max(estimate) - min(estimate) AS growth
FROM counter_snapshots FINAL
WHERE snapshot_time > now() - 3600
GROUP BY store, key, epoch
ORDER BY growth DESC
LIMIT 10;

-- A key's counter over time.
SELECT snapshot_time, epoch, estimate
FROM counter_snapshots
WHERE store = 'counts' AND key = unhex('0a000001')
ORDER BY snapshot_time;

-- Key-Write answers that changed value between snapshots (e.g. a flow's path changed).
SELECT store, hex(key) AS key, uniqExact(value) AS values_seen,
       groupArray(hex(value)) AS history
FROM keywrite_snapshots
WHERE result = 'value'
GROUP BY store, key
HAVING values_seen > 1
LIMIT 20;

-- Share of active keys without a readable Key-Write answer, per snapshot.
SELECT snapshot_time, store, countIf(result != 'value') / count() AS unanswered
FROM keywrite_snapshots
GROUP BY snapshot_time, store
ORDER BY snapshot_time DESC
LIMIT 20;

-- HyperLogLog cardinality and completeness of the newest epochs.
SELECT snapshot_time, store, epoch, cardinality, ratio
FROM sketch_epochs
ORDER BY snapshot_time DESC
LIMIT 20;

-- Heavy hitters of the newest sketch epoch among the active keys.
SELECT store, epoch, hex(key) AS key, argMax(estimate, snapshot_time) AS estimate
FROM sketch_points
WHERE epoch = (SELECT max(epoch) FROM sketch_points)
GROUP BY store, epoch, key
ORDER BY estimate DESC
LIMIT 10;

-- ZERO mode: each agent's newest pulled value per block entry.
SELECT agent, block, idx, argMax(value, snapshot_time) AS value, max(snapshot_time) AS at
FROM pulled_metrics FINAL
GROUP BY agent, block, idx
ORDER BY agent, block, idx
LIMIT 100;
