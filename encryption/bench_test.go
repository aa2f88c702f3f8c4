package encryption_test

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/encryption"
)

// BenchmarkWriteEncrypted measures Outbox.Write of one 1 KiB event per call on the memory
// adapter, without and with encryption (a keyring Cipher: fresh, a new data key per call;
// reuse, Options.ReuseDataKeys), the two interleaved in one loop so that both see the same
// machine state. It reports the time of each (clear-ns/op, encrypted-ns/op) and
// encrypted/clear (ratio; issue 34's target: at least 0.8 of the clear path's throughput,
// ratio <= 1.25).
func BenchmarkWriteEncrypted(b *testing.B) {
	b.Run("fresh", func(b *testing.B) { benchWriteEncrypted(b, 0) })
	b.Run("reuse", func(b *testing.B) { benchWriteEncrypted(b, time.Minute) })
}

func benchWriteEncrypted(b *testing.B, reuse time.Duration) {
	ctx := context.Background()
	_, kr, _ := newKeyring(b, "acme")
	c, err := encryption.New(encryption.Options{Keys: kr, ReuseDataKeys: reuse})
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 1024)
	rand.Read(payload)
	open := func(enc core.PayloadEncrypter) (*memory.Store, *core.Outbox[*memory.Tx]) {
		store, err := memory.New(nil)
		if err != nil {
			b.Fatal(err)
		}
		ob, err := core.NewOutbox(ctx, driver.OutboxStore[*memory.Tx](store), &core.OutboxOptions{Encrypter: enc})
		if err != nil {
			b.Fatal(err)
		}
		return store, ob
	}
	clearStore, clearOb := open(nil)
	encStore, encOb := open(c)
	write := func(store *memory.Store, ob *core.Outbox[*memory.Tx]) time.Duration {
		began := time.Now()
		err := store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
			_, err := ob.Write(ctx, tx, core.Event{AggregateType: "order", AggregateID: "1", Type: "order.placed", Tenant: "acme", Payload: payload})
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(began)
	}
	var clearT, encT time.Duration
	n := 0
	for b.Loop() {
		if n%2 == 0 { // alternate which goes first
			clearT += write(clearStore, clearOb)
			encT += write(encStore, encOb)
		} else {
			encT += write(encStore, encOb)
			clearT += write(clearStore, clearOb)
		}
		n++
	}
	b.ReportMetric(float64(clearT.Nanoseconds())/float64(n), "clear-ns/op")
	b.ReportMetric(float64(encT.Nanoseconds())/float64(n), "encrypted-ns/op")
	b.ReportMetric(float64(encT)/float64(clearT), "ratio")
}
