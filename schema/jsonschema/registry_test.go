package jsonschema_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/fstest"

	js "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/schema/jsonschema"
)

const orderV1 = `{
	"type": "object",
	"required": ["order", "amount"],
	"properties": {
		"order": {"type": "string", "pattern": "^[0-9]+$"},
		"amount": {"$ref": "#/$defs/positive"}
	},
	"$defs": {"positive": {"type": "integer", "minimum": 1}}
}`

func requirePayloadError(t *testing.T, err error, typ, id string, reason error) *jsonschema.PayloadError {
	t.Helper()
	var pe *jsonschema.PayloadError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, typ, pe.Type)
	require.Equal(t, id, pe.SchemaID)
	require.ErrorIs(t, err, reason)
	for _, other := range []error{jsonschema.ErrUnknownSchema, jsonschema.ErrNoSchemaID, jsonschema.ErrNotJSON, jsonschema.ErrInvalidPayload} {
		if other != reason {
			require.NotErrorIs(t, err, other)
		}
	}
	return pe
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := jsonschema.New(nil)
	require.NoError(t, reg.Add("order.created", "v1", []byte(orderV1)))
	require.Equal(t, 1, reg.Len())

	require.NoError(t, reg.Validate(ctx, "order.created", "v1", []byte(`{"order": "42", "amount": 1}`)))
	// No schema id: passes unchecked (Options.RequireSchemaID is false).
	require.NoError(t, reg.Validate(ctx, "order.created", "", []byte(`not json`)))

	err := reg.Validate(ctx, "order.created", "v2", []byte(`{}`))
	requirePayloadError(t, err, "order.created", "v2", jsonschema.ErrUnknownSchema)
	require.EqualError(t, err, `jsonschema: no schema registered for this event type and schema id (type "order.created", schema id "v2")`)
	// The schema id belongs to its type.
	requirePayloadError(t, reg.Validate(ctx, "order.paid", "v1", []byte(`{}`)), "order.paid", "v1", jsonschema.ErrUnknownSchema)

	for _, p := range []string{``, `not json`, `{"order": "42", "amount": 1} {}`, `{"order": "42", "amount": 1`} {
		err := reg.Validate(ctx, "order.created", "v1", []byte(p))
		pe := requirePayloadError(t, err, "order.created", "v1", jsonschema.ErrNotJSON)
		require.Error(t, pe.Err, "the decoder's error, for %q", p)
	}

	// A payload its schema does not accept: the text names where and which keyword, never a
	// value of the payload; the library's error, with the values, is reachable.
	err = reg.Validate(ctx, "order.created", "v1", []byte(`{"order": "s3cr3t-card-number", "amount": -7777}`))
	requirePayloadError(t, err, "order.created", "v1", jsonschema.ErrInvalidPayload)
	require.Contains(t, err.Error(), `at "/order": keyword pattern`)
	require.Contains(t, err.Error(), `at "/amount": keyword minimum`)
	require.NotContains(t, err.Error(), "s3cr3t")
	require.NotContains(t, err.Error(), "777")
	var ve *js.ValidationError
	require.ErrorAs(t, err, &ve)
	require.Contains(t, ve.Error(), "s3cr3t", "the library's own text quotes the payload")

	err = reg.Validate(ctx, "order.created", "v1", []byte(`[]`))
	require.ErrorContains(t, err, `at "/": keyword type`)
}

func TestValidateListsAtMostFiveFailures(t *testing.T) {
	t.Parallel()
	reg := jsonschema.New(nil)
	require.NoError(t, reg.Add("t", "v1", []byte(`{"additionalProperties": {"type": "string"}}`)))
	err := reg.Validate(context.Background(), "t", "v1", []byte(`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7}`))
	require.ErrorIs(t, err, jsonschema.ErrInvalidPayload)
	require.Contains(t, err.Error(), "; and 2 more")
}

func TestOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := jsonschema.New(&jsonschema.Options{RequireSchemaID: true, AllowUnknown: true, AssertFormat: true})
	require.NoError(t, reg.Add("user.created", "v1", []byte(`{"properties": {"at": {"format": "date-time"}}}`)))
	requirePayloadError(t, reg.Validate(ctx, "user.created", "", []byte(`{}`)), "user.created", "", jsonschema.ErrNoSchemaID)
	require.NoError(t, reg.Validate(ctx, "user.created", "v9", []byte(`not json either`)), "unknown schemas pass")
	require.NoError(t, reg.Validate(ctx, "user.created", "v1", []byte(`{"at": "2026-12-06T03:00:00Z"}`)))
	requirePayloadError(t, reg.Validate(ctx, "user.created", "v1", []byte(`{"at": "yesterday"}`)), "user.created", "v1", jsonschema.ErrInvalidPayload)

	// Without AssertFormat, "format" only annotates.
	plain := jsonschema.New(nil)
	require.NoError(t, plain.Add("user.created", "v1", []byte(`{"properties": {"at": {"format": "date-time"}}}`)))
	require.NoError(t, plain.Validate(ctx, "user.created", "v1", []byte(`{"at": "yesterday"}`)))
}

func TestAddRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	other := filepath.Join(dir, "other.json")
	require.NoError(t, os.WriteFile(other, []byte(`{"type": "string"}`), 0o600))
	reg := jsonschema.New(nil)
	require.NoError(t, reg.Add("t", "v1", []byte(`true`)))
	for name, c := range map[string]struct {
		typ, id, schema string
		reason          error
	}{
		"not JSON":        {"t", "v2", `{"type":`, jsonschema.ErrInvalidSchema},
		"bad keyword":     {"t", "v2", `{"type": 5}`, jsonschema.ErrInvalidSchema},
		"bad pattern":     {"t", "v2", `{"pattern": "("}`, jsonschema.ErrInvalidSchema},
		"lookahead":       {"t", "v2", `{"pattern": "^(?=a)"}`, jsonschema.ErrInvalidSchema},
		"ref to a file":   {"t", "v2", `{"$ref": "file://` + filepath.ToSlash(other) + `"}`, jsonschema.ErrInvalidSchema},
		"ref to a URL":    {"t", "v2", `{"$ref": "https://example.test/s.json"}`, jsonschema.ErrInvalidSchema},
		"ref to a path":   {"t", "v2", `{"$ref": "v1.json"}`, jsonschema.ErrInvalidSchema},
		"missing def":     {"t", "v2", `{"$ref": "#/$defs/nope"}`, jsonschema.ErrInvalidSchema},
		"empty type":      {"", "v2", `true`, jsonschema.ErrInvalidSchema},
		"empty id":        {"t", "", `true`, jsonschema.ErrInvalidSchema},
		"already there":   {"t", "v1", `false`, jsonschema.ErrDuplicateSchema},
		"unknown $schema": {"t", "v2", `{"$schema": "https://example.test/meta"}`, jsonschema.ErrInvalidSchema},
	} {
		err := reg.Add(c.typ, c.id, []byte(c.schema))
		var re *jsonschema.RegistrationError
		require.ErrorAs(t, err, &re, name)
		require.ErrorIs(t, err, c.reason, name)
		require.Equal(t, c.typ, re.Type, name)
		require.Equal(t, c.id, re.SchemaID, name)
	}
	require.Equal(t, 1, reg.Len(), "a refused schema leaves nothing behind")
	// The duplicate did not replace the registered schema (true accepts everything).
	require.NoError(t, reg.Validate(context.Background(), "t", "v1", []byte(`1`)))
	// A refused id can be added once fixed.
	require.NoError(t, reg.Add("t", "v2", []byte(`{"type": "integer"}`)))
}

func TestAddFS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := jsonschema.New(nil)
	require.NoError(t, reg.AddFS(fstest.MapFS{
		"order.created/v1.json": {Data: []byte(orderV1)},
		"order.created/v2.json": {Data: []byte(`{"type": "object", "required": ["order"]}`)},
		"order.paid/v1.json":    {Data: []byte(`{"type": "object"}`)},
		"README.md":             {Data: []byte("ignored")},
	}))
	require.Equal(t, 3, reg.Len())
	require.NoError(t, reg.Validate(ctx, "order.created", "v2", []byte(`{"order": "x"}`)))
	require.ErrorIs(t, reg.Validate(ctx, "order.created", "v1", []byte(`{"order": "x"}`)), jsonschema.ErrInvalidPayload)

	for name, fsys := range map[string]fstest.MapFS{
		"top-level file": {"v1.json": {Data: []byte(`true`)}},
		"too deep":       {"a/b/v1.json": {Data: []byte(`true`)}},
		"bad schema":     {"a/v1.json": {Data: []byte(`{"type": 5}`)}},
	} {
		var re *jsonschema.RegistrationError
		err := jsonschema.New(nil).AddFS(fsys)
		require.ErrorAs(t, err, &re, name)
		require.ErrorIs(t, err, jsonschema.ErrInvalidSchema, name)
		require.NotEmpty(t, re.Path, name)
		require.Contains(t, err.Error(), re.Path, name)
	}
}

// Validate runs concurrently with itself and with Add (go test -race).
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := jsonschema.New(nil)
	require.NoError(t, reg.Add("order.created", "v1", []byte(orderV1)))
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 100 {
			if err := reg.Add("order.created", fmt.Sprintf("x%d", i), []byte(`{"type": "object"}`)); err != nil {
				t.Error(err)
			}
		}
	})
	for range 4 {
		wg.Go(func() {
			for i := range 200 {
				amount := i%2 + 0 // 0 is refused, 1 accepted
				err := reg.Validate(ctx, "order.created", "v1", fmt.Appendf(nil, `{"order": "1", "amount": %d}`, amount))
				if (amount == 0) != errors.Is(err, jsonschema.ErrInvalidPayload) {
					t.Errorf("amount %d: %v", amount, err)
				}
			}
		})
	}
	wg.Wait()
	require.Equal(t, 101, reg.Len())
}

// The Registry is what core asks; its rejection reaches the caller inside a *core.SchemaError.
func TestRegistryIsACoreSchemaValidator(t *testing.T) {
	t.Parallel()
	var v core.SchemaValidator = jsonschema.New(nil)
	err := v.Validate(context.Background(), "a", "b", nil)
	require.ErrorIs(t, err, jsonschema.ErrUnknownSchema)
}
