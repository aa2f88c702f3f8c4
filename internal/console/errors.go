package console

import "errors"

// ErrOpenListen is returned by CheckListen (and so by `outboxkit console` at start) when the
// console would listen beyond the loopback interface without any user or token: everyone who
// reaches the port could read the outbox.
var ErrOpenListen = errors.New("console: listening beyond loopback without authentication (give users or tokens in the auth file, or listen on 127.0.0.1)")

// ErrAuthFile is wrapped by LoadAuth's errors: the auth file could not be read, was not valid
// YAML of the expected keys, or failed Auth.Validate.
var ErrAuthFile = errors.New("console: bad auth file")
