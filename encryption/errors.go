package encryption

import (
	"errors"
	"fmt"

	"github.com/outboxkit/outbox/core"
)

// The errors of package encryption, tested with errors.Is. The ones that wrap
// ErrUndecryptable are permanent (core.IsPermanent): retrying cannot help, and the consumers of
// package sinks dead-letter them.
var (
	// ErrUndecryptable is core.ErrUndecryptable: a payload that no attempt can decrypt.
	ErrUndecryptable = core.ErrUndecryptable
	// ErrKeyDestroyed: the payload's key was destroyed (crypto-shredding); every copy of it is
	// unreadable for good.
	ErrKeyDestroyed = fmt.Errorf("%w: key destroyed", core.ErrUndecryptable)
	// ErrTampered: authentication failed: the envelope or its ciphertext was changed, or it
	// was moved to another event ID or tenant, or its wrapped data key does not open.
	ErrTampered = fmt.Errorf("%w: authentication failed (tampered with, or moved to another event or tenant)", core.ErrUndecryptable)
	// ErrMalformed: the payload is not an envelope of a version this package reads (a clear
	// payload, without Options.AllowClear).
	ErrMalformed = fmt.Errorf("%w: not an encryption envelope", core.ErrUndecryptable)
	// ErrUnknownKey: the provider has no such key (or the tenant has no current key, on
	// Write). It is not permanent: the key may not have reached this process's keyring yet.
	ErrUnknownKey = errors.New("encryption: unknown key")
	// ErrKeyringExposed: the keyring file may be read or written by group or others.
	ErrKeyringExposed = errors.New("encryption: keyring file is readable or writable by group or others (chmod 600)")
)

func isUndecryptable(err error) bool { return errors.Is(err, ErrUndecryptable) }
