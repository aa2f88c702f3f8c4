package encryption

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"

	"github.com/outboxkit/outbox/core"
)

// KMSClient is what KMS calls of an AWS KMS client: *kms.Client implements it.
type KMSClient interface {
	Encrypt(ctx context.Context, in *kms.EncryptInput, optFns ...func(*kms.Options)) (*kms.EncryptOutput, error)
	Decrypt(ctx context.Context, in *kms.DecryptInput, optFns ...func(*kms.Options)) (*kms.DecryptOutput, error)
}

// KMSOptions configures a KMS provider.
type KMSOptions struct {
	// Client calls AWS KMS: kms.NewFromConfig(cfg). Required.
	Client KMSClient
	// Keys maps a tenant ("" : events without one) to the KMS key new payloads are encrypted
	// with: a key ID, key ARN, alias name or alias ARN. Required, at least one tenant.
	// Rotation: point a tenant at another key (old payloads name theirs and still decrypt), or
	// let KMS rotate the key material under the same key.
	Keys map[string]string
}

// KMS is the KeyProvider of AWS KMS: each data key is wrapped by kms:Encrypt under the
// tenant's KMS key, with the encryption context {"outboxkit:tenant": tenant} (so that a
// wrapped key cannot serve another tenant), and unwrapped by kms:Decrypt naming the key.
// Crypto-shredding is KMS's ScheduleKeyDeletion: once the key is pending deletion or deleted,
// payloads fail with ErrKeyDestroyed (permanent). Disable a key for a reversible stop
// (DisabledException is retried). It makes one kms:Encrypt per tenant and key per Write call
// and one kms:Decrypt per message.
type KMS struct {
	o KMSOptions
}

var _ KeyProvider = (*KMS)(nil)

// NewKMS returns a KMS provider. A missing Client or Keys is an *core.OptionError.
func NewKMS(opts KMSOptions) (*KMS, error) {
	if opts.Client == nil {
		return nil, &core.OptionError{Field: "Client", Reason: "required: kms.NewFromConfig(cfg)"}
	}
	if len(opts.Keys) == 0 {
		return nil, &core.OptionError{Field: "Keys", Reason: "required: the KMS key of each tenant (\"\" for events without one)"}
	}
	for tenant, id := range opts.Keys {
		if id == "" || len(id) > maxKeyID {
			return nil, &core.OptionError{Field: "Keys", Reason: fmt.Sprintf("tenant %q: want a KMS key ID, ARN or alias of 1 to %d bytes", tenant, maxKeyID)}
		}
	}
	return &KMS{o: opts}, nil
}

// kmsContextKey is the encryption context key that binds a wrapped data key to its tenant.
const kmsContextKey = "outboxkit:tenant"

// CurrentKey returns the KMS key of tenant (KMSOptions.Keys).
func (k *KMS) CurrentKey(_ context.Context, tenant string) (string, error) {
	if id, ok := k.o.Keys[tenant]; ok {
		return id, nil
	}
	return "", fmt.Errorf("%w: tenant %q has no KMS key (KMSOptions.Keys)", ErrUnknownKey, tenant)
}

// WrapKey calls kms:Encrypt.
func (k *KMS) WrapKey(ctx context.Context, tenant, keyID string, dataKey []byte) ([]byte, error) {
	out, err := k.o.Client.Encrypt(ctx, &kms.EncryptInput{KeyId: &keyID, Plaintext: dataKey,
		EncryptionContext: map[string]string{kmsContextKey: tenant}})
	if err != nil {
		return nil, kmsError(err)
	}
	return out.CiphertextBlob, nil
}

// UnwrapKey calls kms:Decrypt, naming keyID (so that a blob of another key is refused).
func (k *KMS) UnwrapKey(ctx context.Context, tenant, keyID string, wrapped []byte) ([]byte, error) {
	out, err := k.o.Client.Decrypt(ctx, &kms.DecryptInput{KeyId: &keyID, CiphertextBlob: wrapped,
		EncryptionContext: map[string]string{kmsContextKey: tenant}})
	if err != nil {
		return nil, kmsError(err)
	}
	return out.Plaintext, nil
}

// kmsError maps KMS's errors: a key pending deletion or deleted is destroyed, a blob that
// does not open (another key, context or tampered) is ErrTampered; the rest is retried.
func kmsError(err error) error {
	var (
		notFound  *types.NotFoundException
		state     *types.KMSInvalidStateException
		invalid   *types.InvalidCiphertextException
		incorrect *types.IncorrectKeyException
	)
	switch {
	case errors.As(err, &notFound), errors.As(err, &state):
		return fmt.Errorf("%w: %w", ErrKeyDestroyed, err)
	case errors.As(err, &invalid), errors.As(err, &incorrect):
		return fmt.Errorf("%w: %w", ErrTampered, err)
	}
	return fmt.Errorf("encryption: kms: %w", err)
}
