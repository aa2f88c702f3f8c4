package opendb

import (
	"net/url"
	"regexp"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// redactedPassword replaces a password in a database address shown to anyone.
const redactedPassword = "xxxxx"

var (
	// URL user info: scheme://user:password@ (also in a URL that does not parse).
	urlPassword = regexp.MustCompile(`(://[^:/@\s]*:)[^@\s]*@`)
	// A keyword/value DSN's password=...: a quoted value (with \' escapes) or up to the next space.
	kvPassword = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)`)
	// A go-sql-driver/mysql DSN (or a URL without its scheme): user:password@ at the start.
	leadingPassword = regexp.MustCompile(`^([^:/@\s]*:)[^@\s]*@`)
)

// Redact is the database address s with any password in it replaced by xxxxx: a URL's user
// info, a keyword/value DSN's password=, a go-sql-driver/mysql DSN's user:password@. Every
// message that shows an address the operator gave shows it through Redact.
func Redact(s string) string {
	s = urlPassword.ReplaceAllString(s, "${1}"+redactedPassword+"@")
	s = kvPassword.ReplaceAllString(s, "${1}"+redactedPassword)
	if !strings.Contains(s, "://") {
		s = leadingPassword.ReplaceAllString(s, "${1}"+redactedPassword+"@")
	}
	return s
}

// Password is the password a database address carries, "" when it has none or cannot be read:
// the secret that the command's and the daemon's output must never show (internal/secret).
func Password(s string) string {
	if u, err := url.Parse(s); err == nil && u.Scheme != "" && strings.Contains(s, "://") {
		p, _ := u.User.Password()
		return p
	}
	if m := urlPassword.FindStringSubmatch(s); m != nil { // a URL that does not parse
		return strings.TrimSuffix(strings.TrimPrefix(m[0], m[1]), "@")
	}
	if c, err := pgconn.ParseConfig(s); err == nil && strings.Contains(s, "=") {
		return c.Password
	}
	if c, err := gomysql.ParseDSN(s); err == nil {
		return c.Passwd
	}
	return ""
}
