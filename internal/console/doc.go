// Package console is the operator console of an outbox in the browser: `outboxkit console` and
// the relay daemon's /console serve it. Its pages are rendered on the server with html/template
// from embedded templates, with one small stylesheet and one small script (live refresh of the
// overview and the lane grid by fetching /fragment/NAME); every page reads without JavaScript.
//
// Pages (under Options.BasePath):
//
//	GET  /                    overview: pending, parked, blocked, oldest age, publish rate and ETA,
//	                          per destination, publisher, CDC checkpoint, inbox consumers, charts
//	GET  /lanes               the lane grid: owner, generation, lease expiry, live/expired/free
//	GET  /parked              parked events, searchable (key, destination, type, error) and paged
//	POST /parked/unpark       unpark the checked keys (key=...) or all matching (all=1 + filter):
//	                          a dry-run count page first, then confirm=1 acts
//	GET  /replay              the replay form; with ids= or key= and since=: the preview
//	POST /replay              without confirm=1: the preview; with it: the replay
//	GET  /audit               the audit log, filterable by who, command, tool, arguments, since
//	GET  /login, POST /login, POST /logout
//	GET  /fragment/overview, /fragment/lanes   the live parts of the two pages
//	GET  /static/...          console.css, console.js
//
// Everything it reads goes through the status reads of `outboxkit status` (internal/opstatus)
// and the store's operator reads; every change goes through core.Operator (Unpark, Replay) with
// an AuditEntry naming the user, written in the transaction of the change, its arguments
// carrying "tool": Options.Actor.
//
// Security: users log in with a name and a password (bcrypt hashes), clients send a bearer
// token; each has the role viewer (reads) or operator (also acts). A session is a random id in
// an HttpOnly, SameSite=Strict cookie (Secure with Options.SecureCookies), held in memory until
// it expires; each session's forms carry its CSRF token (field csrf), checked on every POST (the
// login form carries a double-submit token). A POST that changes something answers 401 to an
// anonymous sender, 403 to a viewer or without a valid CSRF token, and changes nothing. Failed
// logins are limited per client address (Options.LoginFailures a minute, then 429). Every
// response carries Content-Security-Policy default-src 'self' (no inline script or style),
// X-Frame-Options DENY, X-Content-Type-Options nosniff and Referrer-Policy no-referrer. With
// an empty Auth the pages are readable anonymously from a loopback listener only, and nothing
// can be changed; CheckListen refuses to listen beyond loopback without a user or a token.
package console
