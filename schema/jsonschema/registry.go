package jsonschema

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"

	js "github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/outboxkit/outbox/core"
)

// Options configures a Registry. The zero value is ready to use: an event without a schema id
// passes unchecked, and one whose (type, schema id) has no schema is refused.
type Options struct {
	// RequireSchemaID refuses an event that names no schema id (ErrNoSchemaID). Default
	// false: such an event passes unchecked, so that producers can adopt schemas type by type.
	RequireSchemaID bool
	// AllowUnknown lets an event whose (type, schema id) has no registered schema pass
	// unchecked. Default false: it is refused (ErrUnknownSchema), so a schema id that a
	// producer names must be registered before the producer uses it.
	AllowUnknown bool
	// AssertFormat makes the "format" keyword assert (date-time, email, uuid, ...). Default
	// false: as JSON Schema 2019-09 and 2020-12 define it, "format" only annotates.
	AssertFormat bool
}

// Registry holds compiled JSON Schemas keyed by (event type, schema id) and checks payloads
// against them: it is a core.SchemaValidator for core.OutboxOptions.Schemas and
// core.InboxOptions.Schemas. Each schema is compiled once, when it is added. It is safe for
// concurrent use: Validate may run while Add adds.
type Registry struct {
	o       Options
	mu      sync.RWMutex
	schemas map[key]*js.Schema
}

type key struct{ typ, id string }

var _ core.SchemaValidator = (*Registry)(nil)

// New returns an empty Registry. opts may be nil.
func New(opts *Options) *Registry {
	var o Options
	if opts != nil {
		o = *opts
	}
	return &Registry{o: o, schemas: map[key]*js.Schema{}}
}

// Add compiles schema, a JSON Schema document (draft 2020-12 unless its "$schema" names
// another), and registers it for events of eventType whose SchemaID is schemaID. A document
// that is not JSON or not a valid schema, a "$ref" to anything outside the document (other
// files, URLs: nothing is loaded), an empty eventType or schemaID is a *RegistrationError
// (ErrInvalidSchema); a (type, schema id) already registered is one too (ErrDuplicateSchema):
// a schema id names one schema for good, so a changed schema gets a new id. A refused schema
// leaves the registry as it was.
func (r *Registry) Add(eventType, schemaID string, schema []byte) error {
	return r.add(eventType, schemaID, "", schema)
}

// AddFS adds every schema of fsys laid out as <event type>/<schema id>.json (for example
// order.created/v1.json), as Add does. Files not ending in .json are ignored; a .json file at
// another depth is a *RegistrationError (ErrInvalidSchema) naming it. It stops at the first
// refusal; the schemas added before it stay.
func (r *Registry) AddFS(fsys fs.FS) error {
	return fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path.Ext(p) != ".json" {
			return err
		}
		typ, file, ok := strings.Cut(p, "/")
		if !ok || strings.Contains(file, "/") {
			return &RegistrationError{Path: p, Reason: ErrInvalidSchema, Err: errors.New("not laid out as <event type>/<schema id>.json")}
		}
		doc, err := fs.ReadFile(fsys, p)
		if err != nil {
			return &RegistrationError{Type: typ, Path: p, Reason: ErrInvalidSchema, Err: err}
		}
		return r.add(typ, strings.TrimSuffix(file, ".json"), p, doc)
	})
}

func (r *Registry) add(typ, id, file string, schema []byte) error {
	bad := func(reason, err error) error {
		return &RegistrationError{Type: typ, SchemaID: id, Path: file, Reason: reason, Err: err}
	}
	if typ == "" || id == "" {
		return bad(ErrInvalidSchema, errors.New("event type and schema id are required"))
	}
	doc, err := js.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return bad(ErrInvalidSchema, fmt.Errorf("not JSON: %w", err))
	}
	// One compiler per schema: a refused schema leaves nothing behind, and a "$ref" reaches
	// only the document itself (and the meta-schemas the library embeds).
	c := js.NewCompiler()
	c.UseLoader(noLoader{})
	if r.o.AssertFormat {
		c.AssertFormat()
	}
	loc := "mem:///" + typ + "/" + id + ".json"
	if err := c.AddResource(loc, doc); err != nil {
		return bad(ErrInvalidSchema, err)
	}
	sch, err := c.Compile(loc)
	if err != nil {
		return bad(ErrInvalidSchema, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	k := key{typ, id}
	if _, dup := r.schemas[k]; dup {
		return bad(ErrDuplicateSchema, nil)
	}
	r.schemas[k] = sch
	return nil
}

// noLoader refuses to load any document: schemas refer only within themselves.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s is outside the schema document; the registry loads nothing", url)
}

// Validate checks payload against the schema registered for (eventType, schemaID). It returns
// nil when the payload matches, and a *PayloadError otherwise: ErrNoSchemaID (no schema id,
// with Options.RequireSchemaID), ErrUnknownSchema (none registered, unless
// Options.AllowUnknown), ErrNotJSON, or ErrInvalidPayload. An event without a schema id passes
// unchecked unless Options.RequireSchemaID. The same arguments always get the same answer
// (registrations are never replaced), as core.SchemaValidator requires.
func (r *Registry) Validate(_ context.Context, eventType, schemaID string, payload []byte) error {
	reject := func(reason, err error) error {
		return &PayloadError{Type: eventType, SchemaID: schemaID, Reason: reason, Err: err}
	}
	if schemaID == "" {
		if r.o.RequireSchemaID {
			return reject(ErrNoSchemaID, nil)
		}
		return nil
	}
	r.mu.RLock()
	sch := r.schemas[key{eventType, schemaID}]
	r.mu.RUnlock()
	if sch == nil {
		if r.o.AllowUnknown {
			return nil
		}
		return reject(ErrUnknownSchema, nil)
	}
	v, err := js.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return reject(ErrNotJSON, err)
	}
	if err := sch.Validate(v); err != nil {
		return reject(ErrInvalidPayload, err)
	}
	return nil
}

// Len returns how many schemas are registered.
func (r *Registry) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.schemas)
}
