package batcher

import (
	"context"
	"slices"
	"sync"

	"github.com/outboxkit/outbox/core"
)

// Item is one message to place.
type Item struct {
	// Group is the ordering group (core.Message.GroupID): the prefix rule applies per group.
	Group string
	// Dest is the destination; a batch holds items of one destination only.
	Dest string
	// Size counts against Options.MaxBytes (the message's encoded size, as the broker counts
	// it). An item larger than MaxBytes is sent alone: reject it with Err instead when the
	// broker would refuse it.
	Size int
	// Err, when not nil, is the message's outcome without sending it (e.g. it could not be
	// encoded); later messages of its group are held back.
	Err error
}

// Options bound the batches. The zero value puts every item of a destination in one request
// and sends one request at a time.
type Options struct {
	// MaxEntries is the most items of one request. Default (0 or less): no limit.
	MaxEntries int
	// MaxBytes is the most bytes (sum of Item.Size) of one request. Default (0 or less): no
	// limit.
	MaxBytes int
	// Concurrency is the most requests in flight at once. Default (0 or less): 1.
	Concurrency int
	// OnePerGroup puts at most one item of a group in each request. Default false.
	OnePerGroup bool
	// Unordered reports the destinations that keep no order between messages (a standard SQS
	// queue or SNS topic). A batch to such a destination does not wait for the earlier batches
	// of its groups, so one group may have several requests in flight, and a later message
	// of a group may reach the broker before an earlier one. The outcomes still form a
	// per-group prefix of the call: a message acknowledged behind a failed message of its
	// group, in any request, is reported core.ErrNotAcknowledged (the relay sends it again: a
	// duplicate, never a loss). Default nil: every destination keeps order.
	Unordered func(dest string) bool
}

// Batch is one planned request.
type Batch struct {
	Dest  string
	Items []int // indexes into the items given to Plan, in increasing order
	deps  []int // earlier batches sharing a group with this one
}

// Plan places the items. It returns the batches and the outcomes of the items that will not be
// sent (Item.Err, or core.ErrNotAcknowledged behind an earlier Err of their group); the other
// outcomes are nil.
//
// A batch to a destination that keeps order waits for the earlier batches of its groups. When
// several requests may be in flight (Options.Concurrency above 1) and every group goes to one
// destination that keeps order, Plan therefore places whole groups: a group's items are cut
// into chunks of at most one request, chunk n of every group goes into the n-th wave of
// batches (chunks packed first-fit within the wave), and the batches of one wave share no
// group, so they are all sent at once; only a group larger than a request waits between its
// chunks. Otherwise (one request at a time, Options.OnePerGroup, an Unordered destination or
// a group sent to two destinations) each item goes into the first batch with room for it,
// which fills the fewest batches.
func Plan(items []Item, o Options) ([]Batch, []error) {
	out := make([]error, len(items))
	cut := map[string]bool{}
	var send []int
	dest := map[string]string{} // group -> its destination
	waves := o.Concurrency > 1 && !o.OnePerGroup
	for i, it := range items {
		switch {
		case cut[it.Group]:
			out[i] = core.ErrNotAcknowledged
			continue
		case it.Err != nil:
			out[i] = it.Err
			cut[it.Group] = true
			continue
		}
		send = append(send, i)
		if d, ok := dest[it.Group]; ok && d != it.Dest {
			waves = false
		}
		dest[it.Group] = it.Dest
		if o.Unordered != nil && o.Unordered(it.Dest) {
			waves = false
		}
	}
	if waves {
		return planWaves(items, send, o), out
	}
	p := planner{o: o, last: map[string]int{}}
	for _, i := range send {
		p.place(items, i)
	}
	return p.batches, out
}

// planWaves is Plan's placement by whole groups: chunk n of each group in wave n.
func planWaves(items []Item, send []int, o Options) []Batch {
	var groups []string
	of := map[string][]int{}
	for _, i := range send {
		g := items[i].Group
		if _, ok := of[g]; !ok {
			groups = append(groups, g)
		}
		of[g] = append(of[g], i)
	}
	full := func(n, bytes int) bool {
		return (o.MaxEntries > 0 && n > o.MaxEntries) || (o.MaxBytes > 0 && bytes > o.MaxBytes)
	}
	type chunk struct {
		items []int
		bytes int
	}
	var plans []*planner // one per wave
	for _, g := range groups {
		// Cut the group into chunks of at most one request (an item too large for a request
		// alone is a chunk of its own, as Item.Size documents).
		var chunks []chunk
		var c chunk
		for _, i := range of[g] {
			if len(c.items) > 0 && full(len(c.items)+1, c.bytes+items[i].Size) {
				chunks = append(chunks, c)
				c = chunk{}
			}
			c.items = append(c.items, i)
			c.bytes += items[i].Size
		}
		chunks = append(chunks, c)
		for n, c := range chunks {
			for len(plans) <= n {
				plans = append(plans, &planner{o: o, last: map[string]int{}})
			}
			p := plans[n]
			k := p.room(g, items[c.items[0]].Dest, len(c.items), c.bytes)
			if k < 0 {
				k = p.open(items[c.items[0]].Dest)
			}
			for _, i := range c.items {
				p.add(items, k, i)
			}
		}
	}
	// The waves in order; a batch of wave n waits for the batches of wave n-1 that hold its
	// groups' previous chunks.
	var batches []Batch
	where := map[string]int{} // group -> index in batches of its latest chunk
	for _, p := range plans {
		base := len(batches)
		for k, b := range p.batches {
			b.deps = nil
			for _, i := range b.Items {
				if l, ok := where[items[i].Group]; ok && !slices.Contains(b.deps, l) {
					b.deps = append(b.deps, l)
				}
			}
			slices.Sort(b.Items)
			batches = append(batches, b)
			for _, i := range b.Items {
				where[items[i].Group] = base + k
			}
		}
	}
	return batches
}

// planner places items into batches first-fit.
type planner struct {
	o       Options
	batches []Batch
	size    []int          // bytes per batch
	last    map[string]int // group -> index of the batch holding its latest item
}

// room returns the first batch, from the group's latest on (its order), to dest with room for
// n more items of bytes bytes, or -1.
func (p *planner) room(group, dest string, n, bytes int) int {
	from := 0
	if l, ok := p.last[group]; ok {
		from = l
		if p.o.OnePerGroup {
			from = l + 1
		}
	}
	for k := from; k < len(p.batches); k++ {
		if p.batches[k].Dest == dest && (p.o.MaxEntries <= 0 || len(p.batches[k].Items)+n <= p.o.MaxEntries) &&
			(p.o.MaxBytes <= 0 || p.size[k]+bytes <= p.o.MaxBytes) {
			return k
		}
	}
	return -1
}

// place puts item i into the first batch with room for it, or a new one.
func (p *planner) place(items []Item, i int) {
	k := p.room(items[i].Group, items[i].Dest, 1, items[i].Size)
	if k < 0 {
		k = p.open(items[i].Dest)
	}
	p.add(items, k, i)
}

// open starts a new batch to dest and returns its index.
func (p *planner) open(dest string) int {
	p.batches = append(p.batches, Batch{Dest: dest})
	p.size = append(p.size, 0)
	return len(p.batches) - 1
}

// add puts item i into batch k, which then waits for the batch of the group's previous item.
func (p *planner) add(items []Item, k, i int) {
	g := items[i].Group
	if l, ok := p.last[g]; ok && l != k && !slices.Contains(p.batches[k].deps, l) {
		p.batches[k].deps = append(p.batches[k].deps, l)
	}
	p.batches[k].Items = append(p.batches[k].Items, i)
	p.size[k] += items[i].Size
	p.last[g] = k
}

// SendFunc sends one request: the items (indexes into the slice given to Run, in order) to
// dest. It returns one outcome per index: nil when the broker durably acknowledged it.
// It must itself hold back, inside the request, the later messages of a group whose message
// failed before the request was made (e.g. a failed claim-check upload).
type SendFunc func(ctx context.Context, dest string, idx []int) []error

// Run plans the items and sends the batches with send. It returns one outcome per item that
// satisfies core.CheckOutcomes whatever answers send gives.
func Run(ctx context.Context, items []Item, o Options, send SendFunc) []error {
	batches, out := Plan(items, o)
	if o.Concurrency < 1 {
		o.Concurrency = 1
	}
	var (
		mu     sync.Mutex
		failed = map[string]bool{}
		sem    = make(chan struct{}, o.Concurrency)
		done   = make([]chan struct{}, len(batches))
		wg     sync.WaitGroup
	)
	for j := range done {
		done[j] = make(chan struct{})
	}
	for j := range batches {
		wg.Add(1)
		go func(j int) {
			defer wg.Done()
			defer close(done[j])
			b := &batches[j]
			if o.Unordered == nil || !o.Unordered(b.Dest) {
				for _, d := range b.deps {
					<-done[d] // d < j: no cycles
				}
			}
			// Drop the messages of groups that failed in an earlier batch.
			send1 := make([]int, 0, len(b.Items))
			mu.Lock()
			for _, i := range b.Items {
				if failed[items[i].Group] {
					out[i] = core.ErrNotAcknowledged
				} else {
					send1 = append(send1, i)
				}
			}
			mu.Unlock()
			if len(send1) == 0 {
				return
			}
			var res []error
			select {
			case sem <- struct{}{}:
				if err := ctx.Err(); err != nil {
					res = core.Outcomes(len(send1), err)
				} else {
					res = send(ctx, b.Dest, send1)
				}
				<-sem
			case <-ctx.Done():
				res = core.Outcomes(len(send1), ctx.Err())
			}
			if len(res) != len(send1) {
				res = core.Outcomes(len(send1), core.ErrNotAcknowledged)
			}
			// Within the request: nothing of a group is acknowledged after its first failure.
			bad := map[string]bool{}
			for k, i := range send1 {
				g := items[i].Group
				switch {
				case res[k] != nil:
					out[i] = res[k]
					bad[g] = true
				case bad[g]:
					out[i] = core.ErrNotAcknowledged
				default:
					out[i] = nil
				}
			}
			if len(bad) > 0 {
				mu.Lock()
				for g := range bad {
					failed[g] = true
				}
				mu.Unlock()
			}
		}(j)
	}
	wg.Wait()
	if o.Unordered != nil {
		// Batches of one group ran at once: across requests, nothing of a group is
		// acknowledged after its first message that was not.
		bad := map[string]bool{}
		for i := range out {
			g := items[i].Group
			switch {
			case out[i] != nil:
				bad[g] = true
			case bad[g]:
				out[i] = core.ErrNotAcknowledged
			}
		}
	}
	return out
}
