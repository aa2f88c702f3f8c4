package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/encryption"
)

// The keys commands manage a keyring file of package encryption (the local KeyProvider):
// rotate adds a new current key for a tenant, destroy removes keys (crypto-shredding), audited
// in the outbox database when --db is given. AWS KMS keys are managed in KMS (rotate: point the
// tenant at another key; destroy: ScheduleKeyDeletion), not by these commands.

// keysRotateJSON is the output of `outboxkit keys rotate --output json`.
type keysRotateJSON struct {
	Tenant string `json:"tenant"`
	Key    string `json:"key"` // the new current key ID
}

// keysDestroyJSON is the output of `outboxkit keys destroy --output json`.
type keysDestroyJSON struct {
	Tenant    string   `json:"tenant"`
	Destroyed []string `json:"destroyed"` // the key IDs destroyed, sorted
	Audited   bool     `json:"audited"`   // an audit row was written (--db)
}

func keysCommand() *cobra.Command {
	return groupCommand("keys", "manage the keyring file of payload encryption (docs/encryption.md): rotate a tenant's key, destroy keys (crypto-shredding)",
		keysRotateCommand(), keysDestroyCommand())
}

// keyringFlags are the flags of both keys commands.
type keyringFlags struct {
	keyring, tenant, output string
}

func addKeyringFlags(cmd *cobra.Command) *keyringFlags {
	f := &keyringFlags{}
	fl := cmd.Flags()
	fl.StringVar(&f.keyring, "keyring", "", "the keyring file (JSON, mode 0600; package encryption's KeyringFile)")
	fl.StringVar(&f.tenant, "tenant", "", `the tenant (required; "" names the events without a tenant)`)
	fl.StringVar(&f.output, "output", "text", "output format: text or json")
	return f
}

// check refuses a missing --keyring or --tenant, or a bad --output (exit 2).
func (f *keyringFlags) check(cmd *cobra.Command) error {
	switch {
	case f.output != "text" && f.output != "json":
		return usageErr(cmd, "--output: want text or json, got %q", f.output)
	case f.keyring == "":
		return usageErr(cmd, "--keyring is required")
	case !cmd.Flags().Changed("tenant"):
		return usageErr(cmd, `--tenant is required (--tenant "" for the events without a tenant)`)
	}
	return nil
}

func keysRotateCommand() *cobra.Command {
	var f *keyringFlags
	cmd := &cobra.Command{
		Use:   "rotate --keyring FILE --tenant T [--output text|json]",
		Short: "add a new random key for a tenant to the keyring file and make it current (created with mode 0600 when missing); old keys stay, so old payloads still decrypt",
		Long: `Add a new random 32-byte key for --tenant to the keyring file and make it the tenant's current
key: producers (their Keyring reads the file again when it changed) encrypt new payloads with
it, and payloads encrypted with the tenant's older keys still decrypt. The file is replaced
atomically (a reader sees the old file or the new one) and created, mode 0600, when missing.
It prints the new key ID.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(cmd); err != nil {
				return err
			}
			id, err := encryption.RotateKey(f.keyring, f.tenant, time.Now())
			if err != nil {
				return failErr(cmd, err)
			}
			out := keysRotateJSON{Tenant: f.tenant, Key: id}
			return emit(cmd, &dbFlags{output: f.output}, out, func(w io.Writer) {
				fmt.Fprintf(w, "rotated tenant=%q key=%s\n", out.Tenant, out.Key)
			})
		},
	}
	f = addKeyringFlags(cmd)
	return cmd
}

func keysDestroyCommand() *cobra.Command {
	var f *keyringFlags
	var db *dbFlags
	var key string
	var actor *string
	cmd := &cobra.Command{
		Use:   "destroy --keyring FILE --tenant T [--key ID] [--db URL [--actor A]] [--output text|json]",
		Short: "remove a tenant's key (--key) or all its keys from the keyring file, for good: every payload encrypted with them becomes unreadable wherever it is (crypto-shredding); audited with --db",
		Long: `Remove --key, or every key of --tenant, from the keyring file, and record each as destroyed: every
payload encrypted with them (outbox rows, broker copies, claim-check objects) is unreadable for
good, and consumers dead-letter those messages (encryption.ErrKeyDestroyed, permanent). The
file is replaced atomically: a reader sees the old file or the new one. When the tenant's
current key goes, its producers fail to write until keys rotate gives it a new one. There is
no undo: keep no copy of the file from before (backups included) if the data must be gone.

With --db, an audit row (command "keys destroy", the keyring, tenant and key IDs destroyed,
rows: how many) is written to the outbox's audit table; the database is checked first (a role
that may not write the row is refused with nothing destroyed). The row is written after the
file was replaced: when it fails then, the keys are destroyed and the error says so.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(cmd); err != nil {
				return err
			}
			return runKeysDestroy(cmd, f, db, key, *actor)
		},
	}
	f = addKeyringFlags(cmd)
	cmd.Flags().StringVar(&key, "key", "", "the key ID to destroy (default: every key of the tenant)")
	db = addOpenFlags(cmd)
	actor = addActorFlag(cmd)
	return cmd
}

// runKeysDestroy destroys the keys and, with --db, writes the audit row: checked before the
// file changes (the row written in a transaction rolled back), written after. core.Operator
// has no such change and the keyring file cannot share a transaction with the row; the row
// goes through driver.OperatorStore.InOperatorTx (OperatorTx.WriteAudit), which every adapter
// offers (driver.AuditWriter only the CDC ones: not SQLite).
func runKeysDestroy(cmd *cobra.Command, f *keyringFlags, db *dbFlags, key, actor string) error {
	var aw driver.OperatorStore
	if db.db != "" {
		cfg, err := db.config(cmd)
		if err != nil {
			return err
		}
		d, err := openExisting(cmd.Context(), cfg)
		if err != nil {
			return failErr(cmd, err)
		}
		defer d.Close()
		aw = d.Store
		err = aw.InOperatorTx(cmd.Context(), func(ctx context.Context, tx driver.OperatorTx) error {
			if _, err := tx.WriteAudit(ctx, *auditEntry(actor, "keys destroy", map[string]any{"check": true})); err != nil {
				return err
			}
			return driver.ErrAuditChecked // roll back
		})
		if !errors.Is(err, driver.ErrAuditChecked) {
			return failErr(cmd, fmt.Errorf("audit row refused, nothing destroyed: %w", err))
		}
	} else if cmd.Flags().Changed("actor") {
		return usageErr(cmd, "--actor: only with --db (it is recorded in the audit row)")
	}
	ids, err := encryption.DestroyKeys(f.keyring, f.tenant, key, time.Now())
	if err != nil {
		return failErr(cmd, err)
	}
	out := keysDestroyJSON{Tenant: f.tenant, Destroyed: ids}
	if aw != nil {
		entry := auditEntry(actor, "keys destroy", map[string]any{"keyring": f.keyring, "tenant": f.tenant, "key": key, "destroyed": ids})
		entry.Rows = int64(len(ids))
		actx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), auditTimeout)
		defer cancel()
		err := aw.InOperatorTx(actx, func(ctx context.Context, tx driver.OperatorTx) error {
			_, err := tx.WriteAudit(ctx, *entry)
			return err
		})
		if err != nil {
			return failErr(cmd, errors.Join(fmt.Errorf("keys destroyed (%v) but the audit row was not written", ids), err))
		}
		out.Audited = true
	}
	return emit(cmd, &dbFlags{output: f.output}, out, func(w io.Writer) {
		fmt.Fprintf(w, "destroyed tenant=%q keys=%d audited=%t\n", out.Tenant, len(out.Destroyed), out.Audited)
	})
}
