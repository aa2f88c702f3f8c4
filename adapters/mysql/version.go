package mysql

import (
	"fmt"
	"strconv"
	"strings"
)

// ServerVersion is a parsed SELECT VERSION() string.
type ServerVersion struct {
	MariaDB             bool
	Major, Minor, Patch int
	Raw                 string
}

func (v ServerVersion) String() string {
	flavor := "MySQL"
	if v.MariaDB {
		flavor = "MariaDB"
	}
	return fmt.Sprintf("%s %d.%d.%d", flavor, v.Major, v.Minor, v.Patch)
}

// ParseVersion parses what SELECT VERSION() returns, e.g. "8.0.36", "5.7.44-log" or
// "10.11.6-MariaDB-0+deb12u1-log". MariaDB servers are recognised by "MariaDB" in the string
// (and by the "5.5.5-" prefix some of them send in the handshake).
func ParseVersion(s string) (ServerVersion, error) {
	v := ServerVersion{Raw: s, MariaDB: strings.Contains(strings.ToLower(s), "mariadb")}
	num := s
	if v.MariaDB {
		num = strings.TrimPrefix(num, "5.5.5-")
	}
	if i := strings.IndexFunc(num, func(r rune) bool { return r != '.' && (r < '0' || r > '9') }); i >= 0 {
		num = num[:i]
	}
	parts := strings.Split(num, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return ServerVersion{}, fmt.Errorf("%w: cannot parse server version %q", ErrUnsupportedServer, s)
	}
	nums := make([]int, 3)
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || p == "" {
			return ServerVersion{}, fmt.Errorf("%w: cannot parse server version %q", ErrUnsupportedServer, s)
		}
		nums[i] = n
	}
	v.Major, v.Minor, v.Patch = nums[0], nums[1], nums[2]
	return v, nil
}

// less reports whether v is older than major.minor.
func (v ServerVersion) less(major, minor int) bool {
	return v.Major < major || v.Major == major && v.Minor < minor
}

// Check returns an error wrapping ErrUnsupportedServer when the server is older than MySQL 8.0
// or MariaDB 10.6 (the first releases with SKIP LOCKED).
func (v ServerVersion) Check() error {
	if v.MariaDB && v.less(10, 6) {
		return fmt.Errorf("%w: %s (%q); MariaDB 10.6 or later is required", ErrUnsupportedServer, v, v.Raw)
	}
	if !v.MariaDB && v.less(8, 0) {
		return fmt.Errorf("%w: %s (%q); MySQL 8.0 or later is required", ErrUnsupportedServer, v, v.Raw)
	}
	return nil
}
