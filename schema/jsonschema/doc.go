// Package jsonschema is a core.SchemaValidator on JSON Schema
// (github.com/santhosh-tekuri/jsonschema/v6): a Registry of schemas keyed by event type and
// schema id, compiled once when added, that checks payloads in Outbox.Write
// (core.OutboxOptions.Schemas) and before an inbox's handler (core.InboxOptions.Schemas).
//
// # Keys
//
// A schema is registered for one (event type, schema id): Registry.Add, or Registry.AddFS
// for a directory laid out as <event type>/<schema id>.json. A producer names the schema of an
// event with Event.SchemaID; its Type picks the family. A schema id names one schema for good:
// a changed schema gets a new id (v2), registered before any producer writes it, and the
// old id stays for as long as events of it may be in flight or redelivered.
//
// # Rules
//
//   - An event that names no schema id passes unchecked; with Options.RequireSchemaID it is
//     refused (ErrNoSchemaID).
//   - An event whose (type, schema id) has no schema is refused (ErrUnknownSchema); with
//     Options.AllowUnknown it passes unchecked.
//   - A payload that is not one JSON value is refused (ErrNotJSON), and one that its schema
//     does not accept too (ErrInvalidPayload).
//
// Each refusal is a *PayloadError whose text names the failing locations and keywords but
// none of the payload's values. core wraps it in a *core.SchemaError (core.ErrSchemaRejected):
// Write writes nothing of the call, and the inbox records nothing, runs no handler, and its
// consumers dead-letter the message at once.
//
// A schema whose "$ref" reaches outside its own document is refused at registration: the
// registry loads nothing from files or the network. "format" annotates only, unless
// Options.AssertFormat. A "pattern" is compiled with Go's regexp (RE2 syntax, matching in time
// linear in the input), so a payload cannot make a check take exponential time; a pattern
// that RE2 cannot express (lookaround, backreferences) is refused at registration.
//
// # Example
//
//	reg := jsonschema.New(&jsonschema.Options{RequireSchemaID: true})
//	if err := reg.AddFS(os.DirFS("schemas")); err != nil { // schemas/order.created/v1.json, ...
//		return err
//	}
//	outbox, err := core.NewOutbox(ctx, store, &core.OutboxOptions{Schemas: reg})
//	...
//	inbox, err := core.NewInbox(ctx, store, &core.InboxOptions{Schemas: reg})
package jsonschema
