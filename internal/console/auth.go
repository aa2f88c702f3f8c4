package console

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"

	"golang.org/x/crypto/bcrypt"
	"gopkg.in/yaml.v3"
)

// Role is what a user or a token may do: RoleViewer reads every page; RoleOperator also acts
// (unpark, replay).
type Role string

// The roles.
const (
	RoleViewer   Role = "viewer"
	RoleOperator Role = "operator"
)

// User is a person who logs in with a name and a password, checked against PasswordHash, a
// bcrypt hash (`htpasswd -bnBC 10 "" PASSWORD | tr -d ':\n'`).
type User struct {
	Name         string `yaml:"name"`
	Role         Role   `yaml:"role"`
	PasswordHash string `yaml:"password_hash"`
}

// Token is a bearer token (Authorization: Bearer TOKEN) of a named client: the token itself, or
// TokenEnv, the environment variable that holds it (one of the two).
type Token struct {
	Name     string `yaml:"name"`
	Role     Role   `yaml:"role"`
	Token    string `yaml:"token"`
	TokenEnv string `yaml:"token_env"`
}

// Auth is who may use the console (the auth file of `outboxkit console --auth`). Empty: nobody
// logs in; the pages are readable anonymously on loopback only, and nothing can be changed.
type Auth struct {
	Users  []User  `yaml:"users"`
	Tokens []Token `yaml:"tokens"`
}

// MinTokenLen is the shortest bearer token Validate accepts.
const MinTokenLen = 16

// Empty reports whether a names no user and no token.
func (a *Auth) Empty() bool { return len(a.Users) == 0 && len(a.Tokens) == 0 }

// Validate returns one "key: what is wrong and what to do" line per problem, keys relative to
// the auth file (users[0].password_hash); none when a is valid. A token given by TokenEnv is
// read from the environment here.
func (a *Auth) Validate() []string {
	var p []string
	add := func(key, format string, args ...any) { p = append(p, key+": "+fmt.Sprintf(format, args...)) }
	names := map[string]string{}
	checkName := func(key, name string) {
		switch {
		case name == "":
			add(key+".name", "is required (the name the audit log records)")
		case strings.TrimSpace(name) != name || strings.ContainsAny(name, "\x00\r\n\t") || len(name) > 100:
			add(key+".name", "must be at most 100 characters without surrounding spaces or control characters, got %q", name)
		case names[name] != "":
			add(key+".name", "%q is already the name of %s: each user and token needs its own name", name, names[name])
		default:
			names[name] = key
		}
	}
	checkRole := func(key string, r Role) {
		if r != RoleViewer && r != RoleOperator {
			add(key+".role", "want viewer or operator, got %q", string(r))
		}
	}
	for i, u := range a.Users {
		key := fmt.Sprintf("users[%d]", i)
		checkName(key, u.Name)
		checkRole(key, u.Role)
		switch cost, err := bcrypt.Cost([]byte(u.PasswordHash)); {
		case u.PasswordHash == "":
			add(key+".password_hash", "is required: a bcrypt hash (htpasswd -bnBC 10 \"\" PASSWORD | tr -d ':\\n')")
		case err != nil:
			add(key+".password_hash", "is not a bcrypt hash ($2a$/$2b$/$2y$...): %v; make one with htpasswd -bnBC 10 \"\" PASSWORD | tr -d ':\\n'", err)
		case cost < 10:
			add(key+".password_hash", "bcrypt cost %d is too low: use at least 10", cost)
		}
	}
	seen := map[[32]byte]string{}
	for i, t := range a.Tokens {
		key := fmt.Sprintf("tokens[%d]", i)
		checkName(key, t.Name)
		checkRole(key, t.Role)
		tok, src := t.Token, key+".token"
		switch {
		case t.Token != "" && t.TokenEnv != "":
			add(key, "give token or token_env, not both")
			continue
		case t.Token == "" && t.TokenEnv == "":
			add(key, "give token or token_env (the environment variable holding the token)")
			continue
		case t.TokenEnv != "":
			tok, src = os.Getenv(t.TokenEnv), key+".token_env"
			if tok == "" {
				add(src, "$%s is empty or unset: export the token in it", t.TokenEnv)
				continue
			}
		}
		switch {
		case len(tok) < MinTokenLen:
			add(src, "the token must be at least %d characters (openssl rand -hex 32 makes one)", MinTokenLen)
		case strings.ContainsAny(tok, " \t\r\n"):
			add(src, "the token must not contain spaces or line breaks")
		default:
			h := sha256.Sum256([]byte(tok))
			if other, dup := seen[h]; dup {
				add(src, "the same token as %s: each client needs its own", other)
			}
			seen[h] = key
		}
	}
	return p
}

// LoadAuth reads the auth file at path (YAML: users and tokens; an unknown key is refused) and
// validates it. Its errors wrap ErrAuthFile and name every problem.
func LoadAuth(path string) (Auth, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Auth{}, fmt.Errorf("%w: %w", ErrAuthFile, err)
	}
	var a Auth
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&a); err != nil && !errors.Is(err, io.EOF) {
		return Auth{}, fmt.Errorf("%w: %s: %s", ErrAuthFile, path, strings.Join(strings.Fields(err.Error()), " "))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Auth{}, fmt.Errorf("%w: %s: a second YAML document: the file holds one", ErrAuthFile, path)
	}
	if p := a.Validate(); len(p) > 0 {
		return Auth{}, fmt.Errorf("%w: %s: %s", ErrAuthFile, path, strings.Join(p, "; "))
	}
	return a, nil
}

// CheckListen returns an error wrapping ErrOpenListen when addr (host:port) is not on the
// loopback interface and a names no user and no token. An empty host or an unspecified address
// (":8080", "0.0.0.0:8080") listens everywhere; a host name other than localhost counts as
// beyond loopback.
func CheckListen(addr string, a Auth) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("console: listen address %q: %w", addr, err)
	}
	if !a.Empty() || loopbackHost(host) {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrOpenListen, addr)
}

func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.Unmap().IsLoopback()
}

// principal is who sent a request: a logged-in user or a token's client.
type principal struct {
	name string
	role Role
}

// authn holds the resolved credentials of an Auth.
type authn struct {
	users  map[string]User
	tokens []resolvedToken
	// dummy is a bcrypt hash compared against for an unknown user name, so that a wrong name
	// takes as long as a wrong password.
	dummy []byte
}

type resolvedToken struct {
	name string
	role Role
	hash [32]byte // sha256 of the token: compared in constant time
}

func newAuthn(a Auth) *authn {
	n := &authn{users: map[string]User{}}
	for _, u := range a.Users {
		n.users[u.Name] = u
	}
	for _, t := range a.Tokens {
		tok := t.Token
		if t.TokenEnv != "" {
			tok = os.Getenv(t.TokenEnv)
		}
		n.tokens = append(n.tokens, resolvedToken{name: t.Name, role: t.Role, hash: sha256.Sum256([]byte(tok))})
	}
	n.dummy, _ = bcrypt.GenerateFromPassword([]byte("outboxkit-console-dummy"), 10)
	return n
}

// password returns the user of name when password matches its hash.
func (n *authn) password(name, password string) (principal, bool) {
	u, ok := n.users[name]
	hash := n.dummy
	if ok {
		hash = []byte(u.PasswordHash)
	}
	if bcrypt.CompareHashAndPassword(hash, []byte(password)) != nil || !ok {
		return principal{}, false
	}
	return principal{name: u.Name, role: u.Role}, true
}

// bearer returns the client of the token, compared in constant time with every token.
func (n *authn) bearer(token string) (principal, bool) {
	h := sha256.Sum256([]byte(token))
	var found principal
	ok := 0
	for _, t := range n.tokens {
		if subtle.ConstantTimeCompare(h[:], t.hash[:]) == 1 {
			found, ok = principal{name: t.name, role: t.role}, 1
		}
	}
	return found, ok == 1 && token != ""
}
