// Package deploy holds the deployment files of outboxkit (alert rules, dashboard, Dockerfile)
// and reads the metrics catalog, the table of docs/metrics.md, that they and the daemon's tests are
// checked against.
package deploy

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

// Metric is one row of docs/metrics.md's table: a metric as Prometheus sees it.
type Metric struct {
	Name   string   // Prometheus name, with the exporter's unit and _total suffixes
	Type   string   // counter, gauge or histogram
	Unit   string   // OpenTelemetry unit
	Labels []string // attributes as Prometheus labels, sorted (otel_scope_* not listed)
	// Exported says where the metric comes from: "always" (every `outboxkit relay`), "mode polling", "mode cdc",
	// "mode cdc, mysql", "cleanup.enabled", or "inbox" / "sqs consumer" (an application's
	// MeterProvider, not the daemon).
	Exported string
}

var rowRE = regexp.MustCompile("^\\| `(outboxkit_[a-z0-9_]+)` \\|")

// ReadMetrics returns the rows of the metrics table of the Markdown page at path: the table rows whose
// first cell is a metric name in backquotes.
func ReadMetrics(path string) ([]Metric, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Metric
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if !rowRE.MatchString(l) {
			continue
		}
		cells := strings.Split(strings.Trim(l, "| "), " | ")
		if len(cells) != 6 {
			return nil, fmt.Errorf("%s: metrics row has %d cells, want 6 (metric, type, unit, attributes, exported, meaning): %s", path, len(cells), l)
		}
		m := Metric{Name: strings.Trim(cells[0], "`"), Type: cells[1], Unit: strings.Trim(cells[2], "`"), Exported: cells[4]}
		if cells[3] != "none" {
			for lb := range strings.SplitSeq(cells[3], ",") {
				m.Labels = append(m.Labels, strings.Trim(strings.TrimSpace(lb), "`"))
			}
		}
		slices.Sort(m.Labels)
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no metrics table", path)
	}
	return out, nil
}

// Family is one metric family of a Prometheus text exposition.
type Family struct {
	Type   string
	Labels []string // every label of its samples, sorted, without otel_scope_* and le
}

var sampleRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? `)
var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)

// Families parses a Prometheus text exposition (what /metrics serves) by family name.
func Families(text string) map[string]*Family {
	out := map[string]*Family{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if f, ok := strings.CutPrefix(l, "# TYPE "); ok {
			if name, typ, ok := strings.Cut(f, " "); ok {
				out[name] = &Family{Type: typ}
			}
			continue
		}
		m := sampleRE.FindStringSubmatch(l)
		if m == nil || strings.HasPrefix(l, "#") {
			continue
		}
		fam := out[m[1]]
		if fam == nil {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(m[1], suffix); ok && out[base] != nil {
					fam = out[base]
				}
			}
		}
		if fam == nil {
			continue
		}
		for _, lm := range labelRE.FindAllStringSubmatch(m[2], -1) {
			if lm[1] == "le" || strings.HasPrefix(lm[1], "otel_scope_") || slices.Contains(fam.Labels, lm[1]) {
				continue
			}
			fam.Labels = append(fam.Labels, lm[1])
			slices.Sort(fam.Labels)
		}
	}
	return out
}

var nameRE = regexp.MustCompile(`outboxkit_[a-zA-Z0-9_]+`)

// Names returns the outboxkit_ identifiers (metric or label names) a PromQL expression uses.
func Names(expr string) []string { return nameRE.FindAllString(expr, -1) }
