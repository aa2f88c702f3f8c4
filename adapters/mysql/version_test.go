package mysql_test

import (
	"database/sql"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/core"
)

func TestParseVersion(t *testing.T) {
	t.Parallel()
	cases := []struct {
		raw                 string
		mariaDB             bool
		major, minor, patch int
		supported           bool
	}{
		{"10.5.21-MariaDB", true, 10, 5, 21, false},
		{"10.11.6-MariaDB-0+deb12u1-log", true, 10, 11, 6, true},
		{"10.6.0-MariaDB", true, 10, 6, 0, true},
		{"5.5.5-10.6.12-MariaDB", true, 10, 6, 12, true},
		{"5.5.5-10.4.32-MariaDB-log", true, 10, 4, 32, false},
		{"11.4.2-MariaDB-ubu2404", true, 11, 4, 2, true},
		{"5.7.44", false, 5, 7, 44, false},
		{"5.7.44-log", false, 5, 7, 44, false},
		{"8.0.36", false, 8, 0, 36, true},
		{"8.0.36-0ubuntu0.22.04.1", false, 8, 0, 36, true},
		{"8.4.0", false, 8, 4, 0, true},
		{"9.1.0-commercial", false, 9, 1, 0, true},
		{"8.0", false, 8, 0, 0, true},
	}
	for _, c := range cases {
		t.Run(c.raw, func(t *testing.T) {
			t.Parallel()
			v, err := mysql.ParseVersion(c.raw)
			require.NoError(t, err)
			require.Equal(t, c.mariaDB, v.MariaDB)
			require.Equal(t, [3]int{c.major, c.minor, c.patch}, [3]int{v.Major, v.Minor, v.Patch})
			err = v.Check()
			if c.supported {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, mysql.ErrUnsupportedServer)
			require.Contains(t, err.Error(), c.raw, "the error names the version")
		})
	}
	for _, bad := range []string{"", "MariaDB", "x.y.z", "8", "1.2.3.4"} {
		_, err := mysql.ParseVersion(bad)
		require.ErrorIs(t, err, mysql.ErrUnsupportedServer, "ParseVersion(%q)", bad)
	}
}

func TestOptionsValidation(t *testing.T) {
	t.Parallel()
	// Options are checked before any query: a pool that never connects is enough.
	db, err := sql.Open("mysql", "nobody@tcp(127.0.0.1:1)/none")
	require.NoError(t, err)
	defer db.Close()
	ctx := t.Context()
	for _, c := range []struct {
		field string
		o     mysql.Options
	}{
		{"Table", mysql.Options{Table: "1outbox"}},
		{"Table", mysql.Options{Table: "out-box"}},
		{"Table", mysql.Options{Table: "out`box"}},
		{"Table", mysql.Options{Table: "a23456789012345678901234567890123456789012345678901234567"}}, // 57: with _workers > 64
		{"InboxTable", mysql.Options{InboxTable: "inbox; DROP TABLE x"}},
		{"Lanes", mysql.Options{Lanes: -1}},
		{"Lanes", mysql.Options{Lanes: core.MaxLanes + 1}},
		{"ClaimStrategy", mysql.Options{ClaimStrategy: 7}},
	} {
		_, err := mysql.New(ctx, db, &c.o)
		var oe *core.OptionError
		require.True(t, errors.As(err, &oe), "%+v: %v", c.o, err)
		require.Equal(t, c.field, oe.Field)
		require.ErrorIs(t, err, core.ErrInvalidOptions)
	}
	_, err = mysql.New(ctx, nil, nil)
	require.ErrorIs(t, err, core.ErrInvalidOptions)
}
