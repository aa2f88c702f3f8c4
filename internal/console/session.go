package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"sync"
	"time"
)

// session is a logged-in browser: a random id (the cookie), the user, the CSRF token of its
// forms and its expiry. Sessions are held in memory: a restart logs everyone out.
type session struct {
	id      string
	user    principal
	csrf    string
	expires time.Time
}

// sessions holds the live sessions.
type sessions struct {
	mu  sync.Mutex
	ttl time.Duration
	m   map[string]*session
}

func newSessions(ttl time.Duration) *sessions {
	return &sessions{ttl: ttl, m: map[string]*session{}}
}

// randomToken is 32 random bytes, base64url.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (s *sessions) create(p principal, now time.Time) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, x := range s.m { // drop the expired ones
		if !now.Before(x.expires) {
			delete(s.m, id)
		}
	}
	x := &session{id: randomToken(), user: p, csrf: randomToken(), expires: now.Add(s.ttl)}
	s.m[x.id] = x
	return x
}

// get returns the unexpired session of id.
func (s *sessions) get(id string, now time.Time) (*session, bool) {
	if id == "" {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	x, ok := s.m[id]
	if !ok {
		return nil, false
	}
	if !now.Before(x.expires) {
		delete(s.m, id)
		return nil, false
	}
	return x, true
}

func (s *sessions) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

// sameToken compares two CSRF tokens in constant time; an empty one never matches.
func sameToken(a, b string) bool {
	return a != "" && b != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// limiter counts failed logins per client address over a sliding window: once a client has max
// failures within window, its logins are refused (429) until the oldest falls out of it.
type limiter struct {
	mu     sync.Mutex
	max    int
	window time.Duration
	fails  map[string][]time.Time
}

func newLimiter(max int, window time.Duration) *limiter {
	return &limiter{max: max, window: window, fails: map[string][]time.Time{}}
}

// prune drops the failures of key older than the window and returns the rest.
func (l *limiter) prune(key string, now time.Time) []time.Time {
	f := l.fails[key]
	i := 0
	for i < len(f) && now.Sub(f[i]) >= l.window {
		i++
	}
	f = f[i:]
	if len(f) == 0 {
		delete(l.fails, key)
	} else {
		l.fails[key] = f
	}
	return f
}

// blocked reports whether key has used up its failures, and when it may try again.
func (l *limiter) blocked(key string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.prune(key, now)
	if len(f) < l.max {
		return false, 0
	}
	return true, f[0].Add(l.window).Sub(now)
}

func (l *limiter) fail(key string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.fails) > 100_000 { // bound the memory under a flood of addresses
		for k := range l.fails {
			l.prune(k, now)
		}
	}
	l.fails[key] = append(l.prune(key, now), now)
}
