package postgres

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/encryption"
)

// BenchmarkEncryptionCost measures what payload encryption (package encryption, a keyring
// Cipher with a fresh data key per Write call) costs on PostgreSQL, clear and encrypted
// interleaved in one run so that both see the same machine state (issue 34's figures):
//
//   - write: one producer, transactions of an orders row plus Outbox.Write of one 1 KiB event,
//     alternating clear and encrypted outboxes (two schemas of one server), b.N of each. It
//     reports clear-tx/s, encrypted-tx/s and ratio = encrypted/clear throughput (target: at
//     least 0.8).
//   - drain: per round, two outboxes filled with OUTBOXKIT_BENCH_EVENTS (default 200,000)
//     events by Outbox.Write (1 KiB payloads, 500 per transaction), clear and encrypted; one
//     relay (default options, batch 1,000, a sink that discards) drains each, the order
//     alternating between rounds. It prints each round's rates and ratio and reports
//     clear-events/s, encrypted-events/s and median-ratio (encrypted/clear, per round). The
//     relay never decrypts: an encrypted record costs it only its envelope's ~70 bytes more.
func BenchmarkEncryptionCost(b *testing.B) {
	testDSN(b)
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "keyring.json")
	_, err := encryption.RotateKey(path, "acme", time.Now())
	require.NoError(b, err)
	kr, err := encryption.OpenKeyring(path)
	require.NoError(b, err)
	cipher, err := encryption.New(encryption.Options{Keys: kr})
	require.NoError(b, err)
	payload := make([]byte, 1024)
	_, _ = rand.Read(payload)
	event := func(i int) core.Event {
		return core.Event{AggregateType: "order", AggregateID: strconv.Itoa(i % benchKeys), Type: "order.created",
			Tenant: "acme", Payload: payload}
	}
	type side struct {
		s  *Store[pgx.Tx]
		d  *testDB
		ob *core.Outbox[pgx.Tx]
	}
	open := func(enc core.PayloadEncrypter) side {
		s, d := migratedStore(b, dbOptions{maxConns: 4}, &Options{})
		ob, err := core.NewOutbox(ctx, s, &core.OutboxOptions{Encrypter: enc})
		require.NoError(b, err)
		return side{s, d, ob}
	}

	b.Run("write", func(b *testing.B) {
		sides := [2]side{open(nil), open(cipher)} // clear, encrypted
		for _, sd := range sides {
			_, err := sd.d.pool.Exec(ctx, `CREATE TABLE orders (id bigserial PRIMARY KEY, customer text NOT NULL,
				amount bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`)
			require.NoError(b, err)
		}
		var took [2]time.Duration
		write := func(k, i int) {
			sd := sides[k]
			began := time.Now()
			err := pgx.BeginFunc(ctx, sd.d.pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO orders (customer, amount) VALUES ($1, $2)`, "customer-"+strconv.Itoa(i%1000), i); err != nil {
					return err
				}
				_, err := sd.ob.Write(ctx, tx, event(i))
				return err
			})
			require.NoError(b, err)
			took[k] += time.Since(began)
		}
		i := 0
		for b.Loop() {
			first := i % 2 // alternate which goes first
			write(first, i)
			write(1-first, i)
			i++
		}
		b.ReportMetric(float64(i)/took[0].Seconds(), "clear-tx/s")
		b.ReportMetric(float64(i)/took[1].Seconds(), "encrypted-tx/s")
		b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "ratio")
	})

	b.Run("drain", func(b *testing.B) {
		n := benchEvents()
		var took [2]time.Duration
		var ratios []float64 // per round, encrypted/clear
		round := 0
		for b.Loop() {
			b.StopTimer()
			sides := [2]side{open(nil), open(cipher)}
			for _, sd := range sides {
				for from := 0; from < n; from += 500 {
					evs := make([]core.Event, 0, 500)
					for i := from; i < min(from+500, n); i++ {
						evs = append(evs, event(i))
					}
					require.NoError(b, pgx.BeginFunc(ctx, sd.d.pool, func(tx pgx.Tx) error {
						_, err := sd.ob.Write(ctx, tx, evs...)
						return err
					}))
				}
				vacuumSeeded(ctx, b, sd.d)
			}
			b.StartTimer()
			first := round % 2
			var this [2]time.Duration
			for _, k := range []int{first, 1 - first} {
				this[k] = drainWithRelays(b, sides[k].s, 1, false, n, nil)
				took[k] += this[k]
			}
			ratios = append(ratios, this[0].Seconds()/this[1].Seconds())
			fmt.Fprintf(b.Output(), "drain round %d: clear %.0f, encrypted %.0f events/s, ratio %.3f\n",
				round+1, float64(n)/this[0].Seconds(), float64(n)/this[1].Seconds(), ratios[round])
			round++
		}
		b.ReportMetric(float64(n*round)/took[0].Seconds(), "clear-events/s")
		b.ReportMetric(float64(n*round)/took[1].Seconds(), "encrypted-events/s")
		slices.Sort(ratios)
		b.ReportMetric(ratios[len(ratios)/2], "median-ratio")
	})
}
