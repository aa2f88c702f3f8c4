package testkit

import (
	"fmt"
	"strconv"
)

// BigOutboxSQL returns the statements that fill a freshly migrated outbox (the default lane
// count, 64) with rows events in one INSERT ... SELECT each, the first rows-pending published,
// the next one parked, the rest pending (~200-byte payloads, 10,000 keys), then vacuum
// (PostgreSQL: as autovacuum would soon, so that it does not run during the measurement) and
// analyse the table: the large outbox of the operator benchmarks (BenchmarkStatus in cmd/outboxkit,
// BenchmarkPages in internal/console). driverName is "postgres" (table qualified by schema;
// generate_series) or "mysql" (MariaDB: its seq_1_to_N sequence table); run each statement in
// order on the outbox's database.
func BigOutboxSQL(driverName, schema, table string, rows, pending int) ([]string, error) {
	if table == "" {
		table = "outbox"
	}
	published, parked := strconv.Itoa(rows-pending), strconv.Itoa(rows-pending+1)
	switch driverName {
	case "postgres":
		if schema == "" {
			schema = "public"
		}
		t := `"` + schema + `"."` + table + `"`
		return []string{`INSERT INTO ` + t + ` (id, aggregate_type, aggregate_id, type, partition_key, lane, payload, published_at, parked_at, attempts)
				SELECT 'e' || g, 'order', (g % 10000)::text, 'order.created', 'order/' || (g % 10000), (g % 10000) % 64,
					convert_to(repeat('x', 200), 'UTF8'), CASE WHEN g <= ` + published + ` THEN now() END,
					CASE WHEN g = ` + parked + ` THEN now() END, 0
				FROM generate_series(1, ` + strconv.Itoa(rows) + `) AS g`,
			`VACUUM ANALYZE ` + t, `VACUUM ANALYZE "` + schema + `"."` + table + `_pending"`}, nil
	case "mysql":
		t := "`" + table + "`"
		return []string{`INSERT INTO ` + t + ` (id, aggregate_type, aggregate_id, type, partition_key, payload, headers, lane, created_at, published_at, parked_at)
				SELECT CONCAT('e', seq), 'order', seq % 10000, 'order.created', CONCAT('order/', seq % 10000), REPEAT('x', 200), '{}',
					(seq % 10000) % 64, UTC_TIMESTAMP(6), IF(seq <= ` + published + `, UTC_TIMESTAMP(6), NULL),
					IF(seq = ` + parked + `, UTC_TIMESTAMP(6), NULL)
				FROM seq_1_to_` + strconv.Itoa(rows),
			`ANALYZE TABLE ` + t}, nil
	}
	return nil, fmt.Errorf("testkit: no large outbox fill for driver %q (postgres or mysql)", driverName)
}
