package encryption_test

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"

	"github.com/aws/aws-sdk-go-v2/service/kms"
	"github.com/aws/aws-sdk-go-v2/service/kms/types"
)

type (
	kmsEncryptInput      = kms.EncryptInput
	kmsEncryptOutput     = kms.EncryptOutput
	kmsDecryptInput      = kms.DecryptInput
	kmsDecryptOutput     = kms.DecryptOutput
	kmsOptions           = kms.Options
	kmsNotFound          = types.NotFoundException
	kmsInvalidState      = types.KMSInvalidStateException
	kmsIncorrectKey      = types.IncorrectKeyException
	kmsInvalidCiphertext = types.InvalidCiphertextException
)

func fakeAEAD(key []byte) cipher.AEAD {
	b, err := aes.NewCipher(key)
	if err != nil {
		panic(err)
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		panic(err)
	}
	return g
}

func sealFake(key, plain, aad []byte) []byte {
	nonce := make([]byte, 12)
	rand.Read(nonce)
	return fakeAEAD(key).Seal(nonce, nonce, plain, aad)
}

func openFake(key, blob, aad []byte) ([]byte, error) {
	if len(blob) < 12 {
		return nil, aes.KeySizeError(0)
	}
	return fakeAEAD(key).Open(nil, blob[:12], blob[12:], aad)
}
