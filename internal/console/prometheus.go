package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The Prometheus queries of the overview's charts when Options.PrometheusURL is set: the
// relay daemon's backlog gauge and its publish counter's rate (docs/daemon.md, metrics).
const (
	promBacklogQuery = `max(outboxkit_outbox_pending)`
	promRateQuery    = `sum(rate(outboxkit_relay_published_total[1m]))`
	promTimeout      = 3 * time.Second
)

// promCharts draws the charts of the last hour from Prometheus (query_range, a point every
// minute's sixtieth of the hour).
func (c *Console) promCharts(ctx context.Context, now time.Time) ([]chart, error) {
	ctx, cancel := context.WithTimeout(ctx, promTimeout)
	defer cancel()
	out := make([]chart, 0, 2)
	for _, q := range []struct{ title, query, format string }{
		{"Backlog (pending events)", promBacklogQuery, "%.0f"},
		{"Publish rate (events/s, last minute)", promRateQuery, "%.2f"},
	} {
		at, v, err := c.promRange(ctx, q.query, now)
		if err != nil {
			return nil, err
		}
		out = append(out, drawChart(q.title, at, v, now, q.format))
	}
	return out, nil
}

// promRange runs a range query over the last chartWindow and returns the first series.
func (c *Console) promRange(ctx context.Context, query string, now time.Time) ([]time.Time, []float64, error) {
	u := strings.TrimSuffix(c.o.PrometheusURL, "/") + "/api/v1/query_range?" + url.Values{
		"query": {query},
		"start": {strconv.FormatInt(now.Add(-chartWindow).Unix(), 10)},
		"end":   {strconv.FormatInt(now.Unix(), 10)},
		"step":  {"30"},
	}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("prometheus: %w", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if err != nil {
		return nil, nil, fmt.Errorf("prometheus: %w", err)
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Values [][2]json.RawMessage `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, nil, fmt.Errorf("prometheus: %s: not a query_range answer (%d)", query, res.StatusCode)
	}
	if r.Status != "success" {
		return nil, nil, fmt.Errorf("prometheus: %s: %s", query, r.Error)
	}
	if r.Data.ResultType != "matrix" {
		return nil, nil, fmt.Errorf("prometheus: %s: result type %q, want matrix", query, r.Data.ResultType)
	}
	if len(r.Data.Result) == 0 {
		return nil, nil, nil
	}
	var at []time.Time
	var vs []float64
	for _, p := range r.Data.Result[0].Values {
		ts, err := strconv.ParseFloat(string(p[0]), 64)
		if err != nil {
			return nil, nil, fmt.Errorf("prometheus: %s: bad time %s", query, p[0])
		}
		var s string
		if err := json.Unmarshal(p[1], &s); err != nil {
			return nil, nil, fmt.Errorf("prometheus: %s: bad value %s", query, p[1])
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			continue // NaN and the like: no point
		}
		at = append(at, time.Unix(0, int64(ts*1e9)))
		vs = append(vs, v)
	}
	return at, vs, nil
}
