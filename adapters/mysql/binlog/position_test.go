package binlog

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParsePosition(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"file:binlog.000003:1234",
		"gtid:0-1-30;file:binlog.000003:1234",
		"gtid:0-1-30,1-2-5;file:binlog.000003:4",
		"gtid:3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7-9;file:mysql-bin.000010:157",
		"gtid:;file:binlog.000001:4",
	} {
		p, err := parsePosition(s)
		require.NoError(t, err, s)
		require.Equal(t, s, p.String())
	}
	p, err := parsePosition("gtid:3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5;file:mysql-bin.000010:157")
	require.NoError(t, err)
	require.Equal(t, position{gtid: "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5", hasGTID: true, file: "mysql-bin.000010", offset: 157}, p)
	for _, bad := range []string{"", "binlog.000003:12", "file:binlog.000003", "file:binlog.000003:x", "gtid:0-1-30", "file::12", "file:b:99999999999"} {
		_, err := parsePosition(bad)
		require.Error(t, err, bad)
	}
}

func TestFileAfter(t *testing.T) {
	t.Parallel()
	at := func(f string, o uint32) position { return position{file: f, offset: o} }
	require.True(t, fileAfter(at("binlog.000001", 200), at("binlog.000001", 100)))
	require.False(t, fileAfter(at("binlog.000001", 100), at("binlog.000001", 100)))
	require.True(t, fileAfter(at("binlog.000002", 4), at("binlog.000001", 9000)))
	require.True(t, fileAfter(at("binlog.1000000", 4), at("binlog.999999", 9000)))
	require.False(t, fileAfter(at("binlog.999999", 9000), at("binlog.1000000", 4)))
}
