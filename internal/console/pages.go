package console

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/opstatus"
)

// pageNames are the templates of templates/NAME.html, each executed inside layout.html.
var pageNames = []string{"overview", "lanes", "parked", "unpark", "replay", "audit", "login", "result", "error"}

var funcs = template.FuncMap{
	"rfc3339": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			if v.IsZero() {
				return ""
			}
			return v.UTC().Format(time.RFC3339)
		case *time.Time:
			if v == nil {
				return ""
			}
			return v.UTC().Format(time.RFC3339)
		}
		return ""
	},
	"seconds": func(s float64) string { return time.Duration(s * float64(time.Second)).Round(time.Second).String() },
	"rate":    func(p *float64) string { return strconv.FormatFloat(*p, 'f', 2, 64) },
	"num":     thousands,
	"join":    strings.Join,
	"deref":   func(p *float64) float64 { return *p },
	"deref64": func(p *int64) int64 { return *p },
	"minus":   func(a, b int) int { return a - b },
}

// thousands writes n with comma separators (10,000).
func thousands(n any) string {
	var v int64
	switch x := n.(type) {
	case int:
		v = int64(x)
	case int64:
		v = x
	}
	s := strconv.FormatInt(v, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

func parsePages() (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// view is what every template gets.
type view struct {
	Base    string
	Page    string
	Title   string
	User    string
	Role    string
	CanAct  bool // an operator: the forms that change something are shown
	Session bool // logged in with a session (the logout form)
	CSRF    string
	Refresh int // seconds between live refreshes of the page's fragment
	// SampleInterval is Options.SampleInterval (the overview's charts).
	SampleInterval time.Duration
	Data           any
}

// titles of the pages.
var titles = map[string]string{
	"overview": "Overview", "lanes": "Lanes", "parked": "Parked and blocked keys", "unpark": "Unpark: confirm",
	"replay": "Replay", "audit": "Audit log", "login": "Log in", "result": "Done", "error": "Error",
}

func (c *Console) view(name string, id who, data any, csrf string) view {
	v := view{Base: c.base, Page: name, Title: titles[name], User: id.p.name, Role: string(id.p.role),
		CanAct: id.ok && id.p.role == RoleOperator, Session: id.session != nil, CSRF: csrf, Data: data,
		Refresh: int(min(max(c.o.SampleInterval/time.Second, 2), 10)), SampleInterval: c.o.SampleInterval}
	if id.session != nil {
		v.CSRF = id.session.csrf
	}
	return v
}

// render writes the page name (status) with data, or a bare error on a template failure.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, id who, data any, csrf string) {
	c.execute(w, status, name, "layout.html", c.view(name, id, data, csrf))
}

func (c *Console) execute(w http.ResponseWriter, status int, page, tmpl string, v view) {
	var buf bytes.Buffer
	if err := c.pages[page].ExecuteTemplate(&buf, tmpl, v); err != nil {
		c.o.Logger.Error("console_template_failed", "page", page, "error", err)
		http.Error(w, "console: the page could not be drawn (see the console's log)", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail writes an error page: a short message, never a database detail to an anonymous user.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	c.render(w, r, status, "error", c.identify(r), map[string]any{"Status": status, "StatusText": http.StatusText(status), "Message": msg}, "")
}

// pageFunc reads the data of a page.
type pageFunc func(ctx context.Context, r *http.Request, id who) (name string, data any, err error)

// page serves a read-only page to a reader.
func (c *Console) page(f pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := c.readable(w, r, false)
		if !ok {
			return
		}
		name, data, err := f(r.Context(), r, id)
		if err != nil {
			c.storeFailed(w, r, err)
			return
		}
		c.render(w, r, http.StatusOK, name, id, data, "")
	}
}

// fragment serves the live part of a page (its template "live"), fetched by console.js.
func (c *Console) fragment(name string, f pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := c.readable(w, r, true)
		if !ok {
			return
		}
		_, data, err := f(r.Context(), r, id)
		if err != nil {
			c.storeFailed(w, r, err)
			return
		}
		c.execute(w, http.StatusOK, name, "live", c.view(name, id, data, ""))
	}
}

// actionFunc runs a POST of an authorised operator and writes the answer.
type actionFunc func(w http.ResponseWriter, r *http.Request, id who)

func (c *Console) action(f actionFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := c.authorizeAction(w, r)
		if !ok {
			return
		}
		if err := r.ParseForm(); err != nil {
			c.fail(w, r, http.StatusBadRequest, "Bad form: "+oneLine(err.Error()))
			return
		}
		f(w, r, id)
	}
}

func (c *Console) storeFailed(w http.ResponseWriter, r *http.Request, err error) {
	c.o.Logger.Error("console_read_failed", "path", r.URL.Path, "error", err)
	status := http.StatusInternalServerError
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		status = http.StatusServiceUnavailable
	}
	c.fail(w, r, status, "The outbox could not be read: "+oneLine(err.Error()))
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// ---- Overview ----

// InboxConsumer is one inbox consumer as the overview shows it.
type InboxConsumer struct {
	Name    string
	Horizon time.Time // the retention horizon (zero: none)
	Records int64     // the inbox records it holds
}

// ConsumerLister is the optional capability of a store that lists its inbox consumers; the
// overview shows them when the outbox's store has it.
type ConsumerLister interface {
	InboxConsumers(ctx context.Context) ([]InboxConsumer, error)
}

type overviewData struct {
	R              opstatus.Report
	Now            time.Time
	Charts         []chart
	ConsumersKnown bool
	Consumers      []InboxConsumer
	ConsumersError string
	Prometheus     string
	RecentWindow   time.Duration
	// ChartSource is "prometheus" when the charts came from Options.PrometheusURL, "console"
	// when from the console's own samples (PrometheusError says why Prometheus was not used).
	ChartSource     string
	PrometheusError string
}

func (c *Console) overview(ctx context.Context, _ *http.Request, _ who) (string, any, error) {
	rep, now, err := opstatus.Collect(ctx, c.db, c.op)
	if err != nil {
		return "", nil, err
	}
	d := overviewData{R: rep, Now: now, Prometheus: c.o.PrometheusURL, RecentWindow: opstatus.RecentWindow, ChartSource: "console"}
	if c.o.PrometheusURL != "" {
		if d.Charts, err = c.promCharts(ctx, now); err != nil {
			c.o.Logger.Warn("console_prometheus_failed", "error", err)
			d.PrometheusError = oneLine(err.Error())
		} else {
			d.ChartSource = "prometheus"
		}
	}
	if d.Charts == nil {
		d.Charts = charts(c.ring.since(now.Add(-chartWindow)), now)
	}
	if cl, ok := c.db.Store.(ConsumerLister); ok {
		d.ConsumersKnown = true
		if d.Consumers, err = cl.InboxConsumers(ctx); err != nil {
			d.ConsumersError = oneLine(err.Error())
		}
	}
	return "overview", d, nil
}

// ---- Lanes ----

type laneRow struct {
	Lane       int
	Owner      string
	Generation int64
	Until      *time.Time
	State      string // live, expired or free
}

type lanesData struct {
	Rows      []laneRow
	Summary   opstatus.LaneSummary
	Publisher opstatus.Publisher
	Now       time.Time
}

func (c *Console) lanes(ctx context.Context, _ *http.Request, _ who) (string, any, error) {
	ls, err := c.db.Store.Lanes(ctx)
	if err != nil {
		return "", nil, err
	}
	pub, err := c.db.Store.Generation(ctx)
	if err != nil {
		return "", nil, err
	}
	now := time.Now()
	d := lanesData{Now: now}
	var live string
	live, d.Summary = opstatus.SummarizeLanes(ls, pub, now)
	d.Publisher = opstatus.Publisher{Generation: pub.Generation, Kind: pub.Kind, Holder: pub.Holder, LiveHolder: live}
	for _, l := range ls {
		row := laneRow{Lane: l.Lane, Owner: l.Owner, Generation: l.Generation, State: "free"}
		if !l.Until.IsZero() {
			u := l.Until.UTC()
			row.Until = &u
		}
		if l.Owner != "" {
			row.State = "expired"
			if (opstatus.Lane{Owner: l.Owner, LeaseUntil: row.Until}).Live(now) {
				row.State = "live"
			}
		}
		d.Rows = append(d.Rows, row)
	}
	return "lanes", d, nil
}

// ---- Parked and blocked keys ----

// The bounds of the parked page: records per page, parked records read per page view, and
// the most parked records and keys an "unpark all matching" reads and releases at once.
const (
	parkedPage        = 50
	parkedScan        = 100_000
	parkedScanAll     = 1_000_000
	maxUnparkKeys     = 10_000
	listBatch         = 1_000
	unparkPreviewKeys = 200
)

// parkedFilter selects parked records: each non-empty field is a case-insensitive substring of
// the record's partition key, destination, type or last error.
type parkedFilter struct {
	Key, Destination, Type, Error string
}

func filterOf(get func(string) string) parkedFilter {
	return parkedFilter{Key: strings.TrimSpace(get("key_q")), Destination: strings.TrimSpace(get("destination")),
		Type: strings.TrimSpace(get("type")), Error: strings.TrimSpace(get("error"))}
}

func (f parkedFilter) empty() bool { return f == parkedFilter{} }

func (f parkedFilter) match(r driver.Record) bool {
	has := func(s, sub string) bool {
		return sub == "" || strings.Contains(strings.ToLower(s), strings.ToLower(sub))
	}
	return has(r.PartitionKey, f.Key) && has(r.Destination, f.Destination) && has(r.Type, f.Type) && has(r.LastError, f.Error)
}

// query is the filter as URL query parameters.
func (f parkedFilter) query() string {
	q := make([]string, 0, 4)
	for _, kv := range [][2]string{{"key_q", f.Key}, {"destination", f.Destination}, {"type", f.Type}, {"error", f.Error}} {
		if kv[1] != "" {
			q = append(q, kv[0]+"="+urlQueryEscape(kv[1]))
		}
	}
	return strings.Join(q, "&")
}

func (f parkedFilter) args() map[string]string {
	m := map[string]string{}
	for k, v := range map[string]string{"key": f.Key, "destination": f.Destination, "type": f.Type, "error": f.Error} {
		if v != "" {
			m[k] = v
		}
	}
	return m
}

// scanParked reads the parked records after seq after in seq order, and returns up to want
// that match f (want 0: all), having read at most budget records: next is the seq to go on
// after (0 when the end was reached).
func (c *Console) scanParked(ctx context.Context, f parkedFilter, after int64, want, budget int) (out []driver.Record, next int64, err error) {
	read := 0
	for read < budget {
		n := min(listBatch, budget-read)
		recs, err := c.db.Store.List(ctx, driver.ListParams{State: driver.StateParked, AfterSeq: after, Limit: n})
		if err != nil {
			return nil, 0, err
		}
		for _, r := range recs {
			after = r.Seq
			read++
			if f.match(r) {
				out = append(out, r)
				if want > 0 && len(out) == want {
					return out, after, nil
				}
			}
		}
		if len(recs) < n { // the end
			return out, 0, nil
		}
	}
	return out, after, nil // the budget ran out
}

type parkedRow struct {
	Key, ID, Type, Destination, LastError string
	Seq                                   int64
	Attempts                              int
	ParkedAt                              time.Time
}

type parkedData struct {
	Filter   parkedFilter
	Query    string
	Rows     []parkedRow
	Parked   int64
	Blocked  int64
	Next     int64 // the after= of the next page, 0 when none
	After    int64
	Scanned  bool // the scan budget ran out before the page filled
	Filtered bool
}

func rowsOf(recs []driver.Record) []parkedRow {
	out := make([]parkedRow, len(recs))
	for i, r := range recs {
		out[i] = parkedRow{Key: r.PartitionKey, ID: r.ID, Type: r.Type, Destination: r.Destination, LastError: r.LastError,
			Seq: r.Seq, Attempts: r.Attempts, ParkedAt: r.ParkedAt}
	}
	return out
}

func (c *Console) parked(ctx context.Context, r *http.Request, _ who) (string, any, error) {
	q := r.URL.Query()
	f := filterOf(q.Get)
	after, _ := strconv.ParseInt(q.Get("after"), 10, 64)
	st, err := c.db.Store.Stats(ctx)
	if err != nil {
		return "", nil, err
	}
	d := parkedData{Filter: f, Query: f.query(), Parked: st.Parked, After: max(after, 0), Filtered: !f.empty()}
	if st.Parked > 0 {
		if d.Blocked, err = c.db.Store.Blocked(ctx); err != nil {
			return "", nil, err
		}
	}
	recs, next, err := c.scanParked(ctx, f, d.After, parkedPage, parkedScan)
	if err != nil {
		return "", nil, err
	}
	d.Rows, d.Next = rowsOf(recs), next
	d.Scanned = next != 0 && len(recs) < parkedPage
	return "parked", d, nil
}

type unparkData struct {
	Filter   parkedFilter
	Query    string
	All      bool
	Keys     []string // every key to release (hidden inputs of the confirmation)
	Shown    []string // the first unparkPreviewKeys of them
	Records  int      // the parked records of the keys (found by the scan)
	TooMany  bool
	MaxKeys  int
	Selected bool
}

// unparkKeys is the keys a POST /parked/unpark names: the checked keys (key), or with all=1
// every key with a parked record matching the filter. records counts their parked records seen.
//
// countOnly (a dry run of checked keys) also counts their parked records among the first
// parkedScan parked records.
func (c *Console) unparkKeys(ctx context.Context, r *http.Request, f parkedFilter, all, countOnly bool) (keys []string, records int, tooMany bool, err error) {
	seen := map[string]bool{}
	add := func(k string) {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	if !all {
		for _, k := range r.PostForm["key"] {
			if k != "" {
				add(k)
			}
		}
		if !countOnly || len(keys) > maxUnparkKeys {
			return keys, 0, len(keys) > maxUnparkKeys, nil
		}
		recs, _, err := c.scanParked(ctx, parkedFilter{}, 0, 0, parkedScan)
		if err != nil {
			return nil, 0, false, err
		}
		for _, rec := range recs {
			if seen[rec.PartitionKey] {
				records++
			}
		}
		return keys, records, false, nil
	}
	recs, next, err := c.scanParked(ctx, f, 0, 0, parkedScanAll)
	if err != nil {
		return nil, 0, false, err
	}
	for _, rec := range recs {
		add(rec.PartitionKey)
	}
	return keys, len(recs), next != 0 || len(keys) > maxUnparkKeys, nil
}

func (c *Console) unpark(w http.ResponseWriter, r *http.Request, id who) {
	ctx := r.Context()
	f := filterOf(r.PostForm.Get)
	all := r.PostForm.Get("all") == "1"
	dry := r.PostForm.Get("confirm") != "1" || r.PostForm.Get("dry_run") == "1"
	keys, records, tooMany, err := c.unparkKeys(ctx, r, f, all && dry, !all && dry)
	if err != nil {
		c.storeFailed(w, r, err)
		return
	}
	if dry {
		d := unparkData{Filter: f, Query: f.query(), All: all, Keys: keys, Records: records, TooMany: tooMany, MaxKeys: maxUnparkKeys, Selected: !all}
		d.Shown = keys[:min(len(keys), unparkPreviewKeys)]
		c.render(w, r, http.StatusOK, "unpark", id, d, "")
		return
	}
	if tooMany {
		c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("At most %s keys at once: narrow the filter.", thousands(maxUnparkKeys)))
		return
	}
	if len(keys) == 0 {
		c.fail(w, r, http.StatusBadRequest, "No key to unpark: select some keys, or unpark all that match a filter.")
		return
	}
	args := map[string]any{"tool": c.o.Actor, "keys": keys, "all": all}
	if all {
		args["filter"] = f.args()
	}
	n, err := c.op.Unpark(ctx, keys, c.auditEntry(id, "unpark", args))
	if err != nil {
		c.actionFailed(w, r, id, "unpark", err)
		return
	}
	c.o.Logger.Info("console_unpark", "user", id.p.name, "keys", len(keys), "records", n)
	c.render(w, r, http.StatusOK, "result", id, map[string]any{
		"Title": "Unparked", "Message": fmt.Sprintf("Unparked %s records of %s keys; the relays deliver them again in order.", thousands(n), thousands(len(keys))),
		"Back": c.base + "/parked", "BackText": "Parked keys"}, "")
}

// auditEntry is the audit row of an action of id: its name as the actor, the tool among the
// arguments.
func (c *Console) auditEntry(id who, command string, args map[string]any) *core.AuditEntry {
	b, _ := json.Marshal(args) // strings, bools and slices of strings: never fails
	return &core.AuditEntry{Actor: id.p.name, Command: command, Arguments: string(b)}
}

func (c *Console) actionFailed(w http.ResponseWriter, r *http.Request, id who, command string, err error) {
	c.o.Logger.Warn("console_action_failed", "user", id.p.name, "command", command, "error", err)
	status := http.StatusInternalServerError
	var oe *core.OptionError
	var re *core.ReplayError
	if errors.As(err, &oe) || errors.As(err, &re) {
		status = http.StatusConflict
	}
	c.fail(w, r, status, "Nothing was changed: "+oneLine(err.Error()))
}

// ---- Replay ----

// replayRequest is what the replay form asks for: IDs, or a key with a since.
type replayRequest struct {
	IDs      []string
	IDsText  string
	Key      string
	Since    time.Time
	SinceStr string
}

func (q replayRequest) empty() bool { return len(q.IDs) == 0 && q.Key == "" }

func (q replayRequest) params() driver.ReplayParams {
	return driver.ReplayParams{IDs: q.IDs, PartitionKey: q.Key, Since: q.Since}
}

// parseReplay reads the replay form (ids, key, since); problem says what is wrong.
func parseReplay(get func(string) string, now time.Time) (q replayRequest, problem string) {
	q.IDsText = strings.TrimSpace(get("ids"))
	q.IDs = strings.FieldsFunc(q.IDsText, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' || r == '\t' })
	q.Key = get("key")
	q.SinceStr = strings.TrimSpace(get("since"))
	switch {
	case len(q.IDs) > 0 && (q.Key != "" || q.SinceStr != ""):
		return q, "Give event IDs, or a key with a since, not both."
	case len(q.IDs) > driver.MaxReplay:
		return q, fmt.Sprintf("At most %s IDs at once.", thousands(driver.MaxReplay))
	case q.Key != "" && q.SinceStr == "":
		return q, "A key needs a since: an RFC 3339 time or a duration ago (90m)."
	case q.Key == "" && q.SinceStr != "":
		return q, "A since needs a key."
	}
	if q.Key != "" {
		var err error
		if q.Since, err = opstatus.ParseSince(q.SinceStr, now); err != nil {
			return q, "Since: " + err.Error() + "."
		}
	}
	return q, ""
}

// previewRow is one event a replay would send again.
type previewRow struct {
	Seq                                   int64
	ID, Key, Type, Destination, Published string
	Payload                               string
	PayloadBytes                          int
	Headers                               map[string]string
	Missing                               bool
}

type replayData struct {
	Q        replayRequest
	Problem  string
	Preview  bool
	Refusal  string
	Count    int
	Rows     []previewRow
	More     int
	SinceUTC string
}

// previewLimit is how many events the preview shows in full.
const previewLimit = 50

// errPreview rolls back the preview's transaction (it reads only).
var errPreview = errors.New("console: replay preview")

// previewReplay reads what Operator.Replay would put back to pending, in a transaction of the
// store that is rolled back: the publisher (a CDC generation is refused), the targets and
// driver.CheckReplayTargets, Replay's own refusals; then the first events in full.
func (c *Console) previewReplay(ctx context.Context, q replayRequest) (replayData, error) {
	d := replayData{Q: q, Preview: true}
	p := q.params()
	if _, err := driver.CheckReplay(p); err != nil {
		d.Refusal = oneLine(err.Error())
		return d, nil
	}
	var targets []driver.ReplayTarget
	var refusal error
	err := c.db.Store.InOperatorTx(ctx, func(ctx context.Context, tx driver.OperatorTx) error {
		targets, refusal = nil, nil
		pub, err := tx.Publisher(ctx)
		if err != nil {
			return err
		}
		if pub.Kind == driver.KindCDC {
			refusal = &core.ReplayError{Err: core.ErrReplayCDC, Detail: fmt.Sprintf("generation %d held by %q", pub.Generation, pub.Holder)}
			return errPreview
		}
		if targets, err = tx.ReplayTargets(ctx, p, driver.MaxReplay+1); err != nil {
			return err
		}
		_, err = driver.CheckReplayTargets(p.IDs, p.PartitionKey, targets, func(key string) (bool, error) { return tx.KeyUnpublished(ctx, key) })
		var re *core.ReplayError
		if errors.As(err, &re) {
			refusal = err
		} else if err != nil {
			return err
		}
		return errPreview
	})
	if err != nil && !errors.Is(err, errPreview) {
		return d, err
	}
	if refusal != nil {
		d.Refusal = oneLine(refusal.Error())
		return d, nil
	}
	slices.SortFunc(targets, func(a, b driver.ReplayTarget) int { return cmp.Compare(a.Seq, b.Seq) })
	d.Count = len(targets)
	for _, t := range targets[:min(len(targets), previewLimit)] {
		row := previewRow{Seq: t.Seq, ID: t.ID, Key: t.PartitionKey}
		recs, err := c.db.Store.List(ctx, driver.ListParams{State: driver.StateAll, AfterSeq: t.Seq - 1, Limit: 1})
		if err != nil {
			return d, err
		}
		if len(recs) == 1 && recs[0].Seq == t.Seq {
			rec := recs[0]
			row.Type, row.Destination, row.Headers = rec.Type, rec.Destination, rec.Headers
			if !rec.PublishedAt.IsZero() {
				row.Published = rec.PublishedAt.UTC().Format(time.RFC3339)
			}
			row.PayloadBytes = len(rec.Payload)
			row.Payload = payloadText(rec.Payload)
		} else {
			row.Missing = true
		}
		d.Rows = append(d.Rows, row)
	}
	d.More = d.Count - len(d.Rows)
	if q.Key != "" {
		d.SinceUTC = q.Since.UTC().Format(time.RFC3339Nano)
	}
	return d, nil
}

// payloadText is the start of a payload as text (UTF-8), or a note for binary data.
func payloadText(b []byte) string {
	const most = 512
	if !utf8.Valid(b) {
		return fmt.Sprintf("(%d bytes of binary data)", len(b))
	}
	if len(b) > most {
		cut := most
		for cut > 0 && !utf8.RuneStart(b[cut]) {
			cut--
		}
		return string(b[:cut]) + "…"
	}
	return string(b)
}

func (c *Console) replayForm(ctx context.Context, r *http.Request, _ who) (string, any, error) {
	q, problem := parseReplay(r.URL.Query().Get, time.Now())
	if problem != "" || q.empty() {
		return "replay", replayData{Q: q, Problem: problem}, nil
	}
	d, err := c.previewReplay(ctx, q)
	if err != nil {
		return "", nil, err
	}
	return "replay", d, nil
}

func (c *Console) replay(w http.ResponseWriter, r *http.Request, id who) {
	ctx := r.Context()
	q, problem := parseReplay(r.PostForm.Get, time.Now())
	if problem == "" && q.empty() {
		problem = "Give event IDs, or a key with a since."
	}
	if problem != "" {
		c.render(w, r, http.StatusBadRequest, "replay", id, replayData{Q: q, Problem: problem}, "")
		return
	}
	if r.PostForm.Get("confirm") != "1" || r.PostForm.Get("dry_run") == "1" {
		d, err := c.previewReplay(ctx, q)
		if err != nil {
			c.storeFailed(w, r, err)
			return
		}
		c.render(w, r, http.StatusOK, "replay", id, d, "")
		return
	}
	args := map[string]any{"tool": c.o.Actor, "ids": q.IDs}
	if q.Key != "" {
		args = map[string]any{"tool": c.o.Actor, "key": q.Key, "since": q.Since.UTC().Format(time.RFC3339Nano)}
	}
	p := q.params()
	p.Audit = c.auditEntry(id, "replay", args)
	n, err := c.op.Replay(ctx, p)
	if err != nil {
		c.actionFailed(w, r, id, "replay", err)
		return
	}
	c.o.Logger.Info("console_replay", "user", id.p.name, "events", n)
	c.render(w, r, http.StatusOK, "result", id, map[string]any{
		"Title": "Replayed", "Message": fmt.Sprintf("Put %s published events back to pending; the relays send them again in their original order.", thousands(n)),
		"Back": c.base + "/audit", "BackText": "Audit log"}, "")
}

// ---- Audit ----

type auditRow struct {
	ID        int64
	At        time.Time
	Actor     string
	Tool      string
	Command   string
	Rows      int64
	Arguments string
}

type auditData struct {
	Actor, Command, Tool, Text, Since string
	Limit                             int
	Rows                              []auditRow
	Problem                           string
	Filtered                          bool
}

// auditMax is the most audit rows the page reads (the latest).
const auditMax = 1000

func (c *Console) audit(ctx context.Context, r *http.Request, _ who) (string, any, error) {
	q := r.URL.Query()
	d := auditData{Actor: strings.TrimSpace(q.Get("actor")), Command: strings.TrimSpace(q.Get("command")), Tool: strings.TrimSpace(q.Get("tool")),
		Text: strings.TrimSpace(q.Get("text")), Since: strings.TrimSpace(q.Get("since")), Limit: 100}
	if n, err := strconv.Atoi(q.Get("limit")); err == nil && n > 0 {
		d.Limit = min(n, auditMax)
	}
	var since time.Time
	if d.Since != "" {
		var err error
		if since, err = opstatus.ParseSince(d.Since, time.Now()); err != nil {
			d.Problem = "Since: " + err.Error() + "."
			return "audit", d, nil
		}
	}
	d.Filtered = d.Actor != "" || d.Command != "" || d.Tool != "" || d.Text != ""
	limit := d.Limit
	if d.Filtered {
		limit = auditMax
	}
	entries, err := c.op.AuditLog(ctx, driver.AuditListParams{Since: since, Limit: limit})
	if err != nil {
		return "", nil, err
	}
	has := func(s, sub string) bool {
		return sub == "" || strings.Contains(strings.ToLower(s), strings.ToLower(sub))
	}
	for i := len(entries) - 1; i >= 0 && len(d.Rows) < d.Limit; i-- { // newest first
		e := entries[i]
		row := auditRow{ID: e.ID, At: e.At, Actor: e.Actor, Command: e.Command, Rows: e.Rows, Tool: "cli", Arguments: oneLine(e.Arguments)}
		var args map[string]any
		if json.Unmarshal([]byte(e.Arguments), &args) == nil {
			if t, ok := args["tool"].(string); ok && t != "" {
				row.Tool = t
			}
		}
		if has(row.Actor, d.Actor) && has(row.Command, d.Command) && has(row.Tool, d.Tool) && has(row.Arguments, d.Text) {
			d.Rows = append(d.Rows, row)
		}
	}
	return "audit", d, nil
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }
