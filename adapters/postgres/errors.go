package postgres

import "errors"

// ErrSlotActive means a ChangeSource's replication slot is in use by another connection (another
// relay streams from it): Start and Resume wait ChangeSourceOptions.SlotBusyTimeout for it to be released
// and then fail with an error wrapping ErrSlotActive.
var ErrSlotActive = errors.New("postgres: replication slot is active in another connection")
