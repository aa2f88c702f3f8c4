package console

import (
	"context"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/opendb"
	"github.com/outboxkit/outbox/internal/opstatus"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options configures a Console. Zero fields take their defaults.
type Options struct {
	// Auth is who may log in (users) or call with a bearer token (tokens), and with which role.
	// Empty: the pages are readable anonymously from a loopback listener only and nothing can
	// be changed (CheckListen refuses a wider listener).
	Auth Auth
	// BasePath is the URL prefix the console is served under ("/console"); "" or "/" serves
	// it at the root. It must start with "/".
	BasePath string
	// SecureCookies marks the session cookie Secure: set it when the console is served over
	// TLS.
	SecureCookies bool
	// SampleInterval is how often the backlog and the publish rate are sampled for the
	// overview's charts (an in-process ring buffer of the last hour). Default 10s; at least 1s.
	SampleInterval time.Duration
	// PrometheusURL, when set, is the Prometheus server the overview draws its charts from
	// (query_range over the last hour of the relay daemon's outboxkit_outbox_pending and
	// rate(outboxkit_relay_published_total[1m])); when it cannot be read, the console's own
	// samples are drawn and the page says why.
	PrometheusURL string
	// Logger receives the console's logs (logins, actions, failures). Default slog.Default().
	Logger *slog.Logger
	// Actor is the tool recorded in the "tool" argument of every audit row the console writes.
	// Default "console".
	Actor string
	// SessionTTL is how long a login lasts. Default 8h.
	SessionTTL time.Duration
	// LoginFailures is how many failed logins one client address may make within a minute
	// before its logins are refused with 429 until the minute has passed. Default 5.
	LoginFailures int
}

// Console is the operator console: an http.Handler serving the pages of one outbox (see the
// package documentation). It is safe for concurrent use.
type Console struct {
	db       *opendb.DB
	op       *core.Operator
	o        Options
	base     string // BasePath without its trailing slash ("" at the root)
	authn    *authn
	sessions *sessions
	limiter  *limiter
	ring     *ring
	mux      *http.ServeMux
	pages    map[string]*template.Template
	static   http.Handler
	stop     context.CancelFunc
	done     chan struct{}
	once     sync.Once
	now      func() time.Time
}

// The defaults of Options.
const (
	DefaultSampleInterval = 10 * time.Second
	DefaultSessionTTL     = 8 * time.Hour
	DefaultLoginFailures  = 5
	DefaultActor          = "console"
)

// New returns the console of the outbox db (opened as the operator commands open it: see
// cmd/outboxkit) and starts its sampler; Close stops it. Bad options return a
// *core.OptionError naming the field. ctx bounds the sampler as Close does.
func New(ctx context.Context, db *opendb.DB, opts *Options) (*Console, error) {
	if db == nil || db.Store == nil {
		return nil, &core.OptionError{Field: "db", Reason: "must be an opened outbox (opendb.Open)"}
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Actor == "" {
		o.Actor = DefaultActor
	}
	switch {
	case o.SampleInterval == 0:
		o.SampleInterval = DefaultSampleInterval
	case o.SampleInterval < time.Second:
		return nil, &core.OptionError{Field: "SampleInterval", Reason: fmt.Sprintf("must be at least 1s (0: the default 10s), got %s", o.SampleInterval)}
	}
	switch {
	case o.SessionTTL == 0:
		o.SessionTTL = DefaultSessionTTL
	case o.SessionTTL < time.Minute:
		return nil, &core.OptionError{Field: "SessionTTL", Reason: fmt.Sprintf("must be at least 1m (0: the default 8h), got %s", o.SessionTTL)}
	}
	switch {
	case o.LoginFailures == 0:
		o.LoginFailures = DefaultLoginFailures
	case o.LoginFailures < 0:
		return nil, &core.OptionError{Field: "LoginFailures", Reason: "must not be negative (0: the default 5)"}
	}
	base := strings.TrimSuffix(o.BasePath, "/")
	if o.BasePath != "" && (!strings.HasPrefix(o.BasePath, "/") || strings.ContainsAny(o.BasePath, "?#%\"'<> ") || strings.Contains(o.BasePath, "//")) {
		return nil, &core.OptionError{Field: "BasePath", Reason: fmt.Sprintf("must be a URL path starting with / (\"/console\"), got %q", o.BasePath)}
	}
	if o.PrometheusURL != "" {
		u, err := url.Parse(o.PrometheusURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, &core.OptionError{Field: "PrometheusURL", Reason: fmt.Sprintf("must be an http(s) URL of a Prometheus server, got %q", o.PrometheusURL)}
		}
	}
	if p := o.Auth.Validate(); len(p) > 0 {
		return nil, &core.OptionError{Field: "Auth", Reason: strings.Join(p, "; ")}
	}
	op, err := opstatus.NewOperator(db, o.Logger)
	if err != nil {
		return nil, err
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	sub, _ := fs.Sub(staticFS, "static")
	c := &Console{
		db: db, op: op, o: o, base: base,
		authn:    newAuthn(o.Auth),
		sessions: newSessions(o.SessionTTL),
		limiter:  newLimiter(o.LoginFailures, time.Minute),
		ring:     newRing(o.SampleInterval),
		pages:    pages,
		static:   http.StripPrefix("/static/", http.FileServerFS(sub)),
		done:     make(chan struct{}),
		now:      time.Now,
	}
	c.routes()
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.stop = cancel
	go func() {
		select {
		case <-ctx.Done():
			cancel()
		case <-sctx.Done():
		}
	}()
	go c.sampler(sctx)
	return c, nil
}

// Close stops the sampler and waits for it. The database stays open (the caller's).
func (c *Console) Close() error {
	c.once.Do(func() {
		c.stop()
		<-c.done
	})
	return nil
}

func (c *Console) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", c.page(c.overview))
	m.HandleFunc("GET /lanes", c.page(c.lanes))
	m.HandleFunc("GET /parked", c.page(c.parked))
	m.HandleFunc("POST /parked/unpark", c.action(c.unpark))
	m.HandleFunc("GET /replay", c.page(c.replayForm))
	m.HandleFunc("POST /replay", c.action(c.replay))
	m.HandleFunc("GET /audit", c.page(c.audit))
	m.HandleFunc("GET /fragment/overview", c.fragment("overview", c.overview))
	m.HandleFunc("GET /fragment/lanes", c.fragment("lanes", c.lanes))
	m.HandleFunc("GET /login", c.loginForm)
	m.HandleFunc("POST /login", c.login)
	m.HandleFunc("POST /logout", c.logout)
	m.HandleFunc("GET /static/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=300")
		c.static.ServeHTTP(w, r)
	})
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusNotFound, "No such page.")
	})
	c.mux = m
}

// securityHeaders are set on every response.
var securityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
	"X-Frame-Options":         "DENY",
	"X-Content-Type-Options":  "nosniff",
	"Referrer-Policy":         "no-referrer",
}

// ServeHTTP serves the console's pages under BasePath.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	for k, v := range securityHeaders {
		h.Set(k, v)
	}
	path := r.URL.Path
	if c.base != "" {
		if path == c.base {
			http.Redirect(w, r, c.base+"/", http.StatusFound)
			return
		}
		rest, ok := strings.CutPrefix(path, c.base+"/")
		if !ok {
			c.fail(w, r, http.StatusNotFound, "No such page.")
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + rest
		r2.URL.RawPath = ""
		r = r2
	}
	if r.Method == http.MethodPost {
		r.Body = http.MaxBytesReader(w, r.Body, 4<<20)
	}
	c.mux.ServeHTTP(w, r)
}

// sessionCookie is the name of the session cookie; loginCookie holds the CSRF token of the
// login form (a double-submit cookie: no session exists yet).
const (
	sessionCookie = "outboxkit_console_session"
	loginCookie   = "outboxkit_console_login"
)

// who is the sender of a request: the bearer token's client, else the session's user.
type who struct {
	p       principal
	session *session // nil for a bearer token or anonymous
	ok      bool
	bearer  bool
	badAuth bool // an Authorization header that matched no token
}

func (c *Console) identify(r *http.Request) who {
	if h := r.Header.Get("Authorization"); h != "" {
		tok, found := strings.CutPrefix(h, "Bearer ")
		if p, ok := c.authn.bearer(strings.TrimSpace(tok)); found && ok {
			return who{p: p, ok: true, bearer: true}
		}
		return who{badAuth: true}
	}
	if ck, err := r.Cookie(sessionCookie); err == nil {
		if s, ok := c.sessions.get(ck.Value, c.now()); ok {
			return who{p: s.user, session: s, ok: true}
		}
	}
	return who{}
}

// anonymousReads reports whether an anonymous reader may see the pages: no auth configured
// and the request came in on a loopback listener.
func (c *Console) anonymousReads(r *http.Request) bool {
	if !c.o.Auth.Empty() {
		return false
	}
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	host, _, err := net.SplitHostPort(a.String())
	return err == nil && loopbackHost(host)
}

// readable returns the reader of a GET, or writes the refusal (a redirect to the login page,
// 401 to a bearer client or a fragment) and returns false.
func (c *Console) readable(w http.ResponseWriter, r *http.Request, fragment bool) (who, bool) {
	id := c.identify(r)
	if id.ok || (!id.badAuth && c.anonymousReads(r)) {
		return id, true
	}
	if id.badAuth || fragment {
		w.Header().Set("WWW-Authenticate", `Bearer realm="outboxkit console"`)
		c.fail(w, r, http.StatusUnauthorized, "Log in first.")
		return id, false
	}
	http.Redirect(w, r, c.base+"/login?next="+url.QueryEscape(c.base+r.URL.RequestURI()), http.StatusSeeOther)
	return id, false
}

// authorizeAction checks a POST that changes something: an operator (401 anonymous, 403
// viewer) and, for a session, its CSRF token (403). It writes the refusal.
func (c *Console) authorizeAction(w http.ResponseWriter, r *http.Request) (who, bool) {
	id := c.identify(r)
	if !id.ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="outboxkit console"`)
		c.fail(w, r, http.StatusUnauthorized, "Log in as an operator first.")
		return id, false
	}
	if !id.bearer && !c.csrfOK(r, id.session) {
		c.fail(w, r, http.StatusForbidden, "The form's security token is missing or stale: reload the page and try again.")
		return id, false
	}
	if id.p.role != RoleOperator {
		c.fail(w, r, http.StatusForbidden, "Only an operator may do this; you are logged in as a viewer.")
		return id, false
	}
	return id, true
}

func (c *Console) csrfOK(r *http.Request, s *session) bool {
	if s == nil {
		return false
	}
	if err := r.ParseForm(); err != nil {
		return false
	}
	return sameToken(r.PostForm.Get("csrf"), s.csrf)
}

// clientAddr is the address a request came from (the login rate limit's key). Proxies' headers
// are not trusted.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func (c *Console) loginForm(w http.ResponseWriter, r *http.Request) {
	c.renderLogin(w, r, http.StatusOK, "")
}

func (c *Console) renderLogin(w http.ResponseWriter, r *http.Request, status int, msg string) {
	tok := randomToken()
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: tok, Path: c.cookiePath(), HttpOnly: true, Secure: c.o.SecureCookies,
		SameSite: http.SameSiteStrictMode, MaxAge: 3600})
	next := r.FormValue("next")
	if !c.localPath(next) {
		next = c.base + "/"
	}
	c.render(w, r, status, "login", who{}, map[string]any{"Next": next, "Error": msg, "NoUsers": len(c.o.Auth.Users) == 0}, tok)
}

// localPath reports whether p is a path of the console (a safe redirect target).
func (c *Console) localPath(p string) bool {
	return strings.HasPrefix(p, c.base+"/") && !strings.HasPrefix(p, "//") && !strings.Contains(p, "\\") && !strings.ContainsAny(p, "\r\n")
}

func (c *Console) cookiePath() string {
	if c.base == "" {
		return "/"
	}
	return c.base + "/"
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	addr := clientAddr(r)
	now := c.now()
	if blocked, wait := c.limiter.blocked(addr, now); blocked {
		w.Header().Set("Retry-After", fmt.Sprint(int(wait.Seconds())+1))
		c.o.Logger.Warn("console_login_rate_limited", "client", addr)
		c.fail(w, r, http.StatusTooManyRequests, "Too many failed logins from your address: wait a minute.")
		return
	}
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, http.StatusBadRequest, "Bad form.")
		return
	}
	ck, err := r.Cookie(loginCookie)
	if err != nil || !sameToken(ck.Value, r.PostForm.Get("csrf")) {
		c.fail(w, r, http.StatusForbidden, "The login form's security token is missing or stale: reload the login page and try again.")
		return
	}
	name := r.PostForm.Get("name")
	p, ok := c.authn.password(name, r.PostForm.Get("password"))
	if !ok {
		c.limiter.fail(addr, now)
		c.o.Logger.Warn("console_login_failed", "user", name, "client", addr)
		c.renderLogin(w, r, http.StatusUnauthorized, "Wrong name or password.")
		return
	}
	if old, err := r.Cookie(sessionCookie); err == nil { // a new id at every login
		c.sessions.remove(old.Value)
	}
	s := c.sessions.create(p, now)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.id, Path: c.cookiePath(), HttpOnly: true, Secure: c.o.SecureCookies,
		SameSite: http.SameSiteStrictMode, Expires: s.expires})
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: "", Path: c.cookiePath(), HttpOnly: true, Secure: c.o.SecureCookies, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	c.o.Logger.Info("console_login", "user", p.name, "role", string(p.role), "client", addr)
	next := r.PostForm.Get("next")
	if !c.localPath(next) {
		next = c.base + "/"
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	id := c.identify(r)
	if id.session == nil {
		c.fail(w, r, http.StatusUnauthorized, "Not logged in.")
		return
	}
	if !c.csrfOK(r, id.session) {
		c.fail(w, r, http.StatusForbidden, "The form's security token is missing or stale: reload the page and try again.")
		return
	}
	c.sessions.remove(id.session.id)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: c.cookiePath(), HttpOnly: true, Secure: c.o.SecureCookies, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, c.base+"/login", http.StatusSeeOther)
}
