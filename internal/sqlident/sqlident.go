// Package sqlident holds the identifier rule the SQL adapters share: the names an adapter
// derives from its table options (tables, indexes, sequences, functions) must not collide, or
// New and Migrate would succeed and every later call fail with a raw SQL error.
package sqlident

import (
	"fmt"
	"strings"

	"github.com/outboxkit/outbox/core"
)

// Ident is one identifier an adapter derives from the option named Field.
type Ident struct {
	Field string // the option it derives from, e.g. "Table" or "InboxTable"
	Name  string // the unquoted identifier
}

// CheckCollisions returns a *core.OptionError naming the option of the later of two identifiers
// that are equal when compared case-insensitively (SQLite and MySQL on some platforms fold
// case; refusing case variants everywhere keeps one rule for every adapter).
func CheckCollisions(ids ...Ident) error {
	seen := make(map[string]string, len(ids))
	for _, id := range ids {
		key := strings.ToLower(id.Name)
		if other, dup := seen[key]; dup {
			return &core.OptionError{Field: id.Field, Reason: fmt.Sprintf("identifier %q collides with %q", id.Name, other)}
		}
		seen[key] = id.Name
	}
	return nil
}
