package batcher

import (
	"context"
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
func Plan(items []Item, o Options) ([]Batch, []error) {
	out := make([]error, len(items))
	var batches []Batch
	size := []int{}
	last := map[string]int{} // group -> index of the batch holding its latest message
	cut := map[string]bool{}
	for i, it := range items {
		if cut[it.Group] {
			out[i] = core.ErrNotAcknowledged
			continue
		}
		if it.Err != nil {
			out[i] = it.Err
			cut[it.Group] = true
			continue
		}
		from := 0
		if l, ok := last[it.Group]; ok {
			from = l
			if o.OnePerGroup {
				from = l + 1
			}
		}
		j := -1
		for k := from; k < len(batches); k++ {
			b := &batches[k]
			if b.Dest == it.Dest && (o.MaxEntries <= 0 || len(b.Items) < o.MaxEntries) &&
				(o.MaxBytes <= 0 || size[k]+it.Size <= o.MaxBytes) {
				j = k
				break
			}
		}
		if j < 0 {
			batches = append(batches, Batch{Dest: it.Dest})
			size = append(size, 0)
			j = len(batches) - 1
		}
		if l, ok := last[it.Group]; ok && l != j && !contains(batches[j].deps, l) {
			batches[j].deps = append(batches[j].deps, l)
		}
		batches[j].Items = append(batches[j].Items, i)
		size[j] += it.Size
		last[it.Group] = j
	}
	return batches, out
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
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
