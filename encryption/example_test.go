package encryption_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/encryption"
)

// A keyring file with a key for tenant "acme"; the Cipher encrypts in Write and decrypts in
// the inbox, before the handler.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "keys")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "keyring.json")
	if _, err := encryption.RotateKey(path, "acme", time.Now()); err != nil { // outboxkit keys rotate
		panic(err)
	}
	keys, err := encryption.OpenKeyring(path)
	if err != nil {
		panic(err)
	}
	c, _ := encryption.New(encryption.Options{Keys: keys})

	store, _ := memory.New(nil)
	ob, _ := core.NewOutbox(ctx, driver.OutboxStore[*memory.Tx](store), &core.OutboxOptions{Encrypter: c})
	var stored []core.Event
	_ = store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
		stored, err = ob.Write(ctx, tx, core.Event{AggregateType: "order", AggregateID: "42",
			Type: "order.placed", Tenant: "acme", Payload: []byte(`{"total":10}`)})
		return err
	})
	fmt.Println("stored encrypted:", encryption.IsEnvelope(stored[0].Payload))

	inbox, _ := core.NewInbox[*memory.Tx](ctx, store, &core.InboxOptions{Decrypter: c})
	_, err = inbox.Process(ctx, "billing", core.InboxMessageOf(&stored[0], time.Time{}, ""),
		func(ctx context.Context, tx *memory.Tx, m core.InboxMessage) error {
			fmt.Println("handler:", string(m.Payload))
			return nil
		})
	fmt.Println(err)
	// Output:
	// stored encrypted: true
	// handler: {"total":10}
	// <nil>
}
