// Package encryption is outboxkit's opt-in payload encryption: envelope encryption of each
// event's payload with AES-256-GCM, the data key wrapped by a KeyProvider, so that outbox
// rows, broker copies and claim-check objects hold only ciphertext, and a tenant's data (or
// one data subject's) can be made unreadable everywhere at once by destroying its key
// (crypto-shredding).
//
// # Use
//
// One Cipher serves both sides: core.OutboxOptions.Encrypter (Outbox.Write encrypts after
// validation and the schema check) and core.InboxOptions.Decrypter (Inbox.Process,
// ProcessBatch and ProcessSet decrypt before the schema check, the digest and the handler).
// The consumers of package sinks hand their handlers the delivery with the plaintext
// payload, with no change to the handler. Nil options mean clear payloads, as before.
//
// # Keys
//
//   - Keyring: a local JSON file (KeyringFile) of 32-byte keys per tenant, one current;
//     mode 0600 or it is refused (ErrKeyringExposed). For tests and small deployments.
//     `outboxkit keys rotate` adds a current key, `outboxkit keys destroy` shreds (audited
//     with --db). A running Keyring sees the file change within a second.
//   - KMS: AWS KMS (aws-sdk-go-v2), kms:Encrypt / kms:Decrypt of each data key under the
//     tenant's KMS key, the tenant as encryption context. Shredding is KMS's key deletion.
//     The local emulator has no KMS: the provider is tested against an interface fake of the
//     client (KMSClient), not against KMS.
//   - any KeyProvider of the application's.
//
// Rotation: new payloads use the tenant's current key; every envelope names its key, so old
// payloads still decrypt while their key exists. Per-data-subject keys: Options.SelectKey
// names the key of an event (a key of its tenant), and destroying that key shreds that
// subject's events only.
//
// # Data keys
//
// One fresh random data key per tenant and key per Write call (a batch), wrapped once; each
// event has its own random 96-bit nonce. Per call rather than per event because wrapping
// is a KMS round trip inside the producer's transaction; nothing is lost for shredding,
// which destroys the wrapping key, and a data key never serves two calls. Options.ReuseDataKeys
// trades this for cost: a data key serves the calls of an interval, and consumers keep
// unwrapped data keys that long (a destroyed key then takes up to the interval to bite).
//
// # Envelope (version 1)
//
// The payload itself is the envelope, not headers: every copy (outbox row, broker message,
// claim-check object, a replay) carries all that is needed to decrypt it, through every
// sink's mapping (header names are prefixed or folded by some, SQS allows 10 attributes,
// and headers count towards core.Limits), and the key ID is authenticated with the data.
// Layout, integers big-endian:
//
//	"\x00OKE"        4 bytes, magic (no JSON, text or protobuf payload starts with 0x00)
//	0x01             1 byte, version: AES-256-GCM, 96-bit nonce, 128-bit tag
//	key ID length    2 bytes (1 to 2048), then the key ID (the provider's)
//	wrapped length   2 bytes (1 to 4096), then the wrapped data key (the provider's format;
//	                 Keyring: nonce, AES-256-GCM of the data key, tag, with tenant and key
//	                 ID authenticated)
//	nonce            12 bytes
//	ciphertext       the rest: AES-256-GCM of the payload, with its 16-byte tag
//
// The additional authenticated data is the header (magic to nonce), then the event ID and
// the tenant, each after its 2-byte length: a ciphertext moved to another event or tenant,
// or any changed byte, fails with ErrTampered. Parse reads a header without decrypting.
// core.Limits.MaxPayloadBytes bounds the plaintext; the envelope adds 37 bytes plus the key
// ID and the wrapped key (Keyring: 60 bytes; KMS: about 180).
//
// # Errors
//
// A payload that cannot be decrypted is an error wrapping ErrUndecryptable
// (core.ErrUndecryptable), permanent (core.IsPermanent), when retrying cannot help:
// ErrKeyDestroyed, ErrTampered, ErrMalformed (a clear payload, unless Options.AllowClear).
// The inbox records nothing and the consumers dead-letter the message. ErrUnknownKey (a key
// this process's provider does not know, perhaps not yet) is retried.
package encryption
