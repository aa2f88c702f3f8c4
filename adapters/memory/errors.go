package memory

import (
	"fmt"

	"github.com/outboxkit/outbox/core"
)

// ErrTxDone is returned by a *Tx method called after its transaction ended.
// errors.Is(err, core.ErrInvalidTx) is true for it.
var ErrTxDone = fmt.Errorf("memory: transaction already ended (%w)", core.ErrInvalidTx)
