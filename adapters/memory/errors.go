package memory

import "errors"

// ErrTxDone is returned by a *Tx method called after its transaction ended.
var ErrTxDone = errors.New("memory: transaction already ended")
