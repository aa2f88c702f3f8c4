package testkit

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"database/sql"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
)

// TLSOnlyUser is the user the test servers refuse every connection without TLS (PostgreSQL:
// pg_hba "hostnossl ... reject", replication included; MariaDB: REQUIRE SSL, set by the test
// that creates it). A test that connects as it and succeeds has connected with TLS.
const TLSOnlyUser = "tlsonly"

// PostgresTLSDSN is a pgx URL to the PostgreSQL test server as TLSOnlyUser through host (which
// must be "localhost" for the certificate to match) with sslmode=verify-full and the server's
// CA as sslrootcert (ca: PostgresTLSCA's file, or another to see verification fail).
func PostgresTLSDSN(tb testing.TB, host, ca string) string {
	tb.Helper()
	u, err := url.Parse(Need(tb, PostgresDSN))
	if err != nil {
		tb.Fatalf("%s: %v", PostgresDSN, err)
	}
	u.User = url.User(TLSOnlyUser)
	u.Host = net.JoinHostPort(host, u.Port())
	u.RawQuery = url.Values{"sslmode": {"verify-full"}, "sslrootcert": {ca}}.Encode()
	return u.String()
}

// UntrustedCA writes, in a temporary directory, the PEM certificate of a fresh CA that signed
// none of the test servers' certificates, and returns its path.
func UntrustedCA(tb testing.TB) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "untrusted-ca.crt")
	if err := os.WriteFile(path, untrustedCA(tb), 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

// untrustedCA returns the PEM certificate of a fresh CA that signed nothing.
func untrustedCA(tb testing.TB) []byte {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "untrusted test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// The TLS configurations MySQLTLSDSN registers with go-sql-driver/mysql.
const (
	MySQLTLSVerify    = "outboxkit-test-verify"     // the server's CA, the name "localhost"
	MySQLTLSUntrusted = "outboxkit-test-untrusted"  // a CA that signed nothing
	MySQLTLSWrongHost = "outboxkit-test-wrong-host" // the server's CA, the name dialled (127.0.0.1)
)

var mysqlTLSOnce sync.Once

// MySQLTLSDSN creates TLSOnlyUser on the MariaDB test server when missing (REQUIRE SSL, every
// privilege) and returns a go-sql-driver/mysql DSN (parseTime=true) as that user on database
// db, with the TLS configuration tlsName (MySQLTLSVerify, MySQLTLSUntrusted or
// MySQLTLSWrongHost; "" for none, which the server refuses that user).
func MySQLTLSDSN(tb testing.TB, db, tlsName string) string {
	tb.Helper()
	cfg, err := mysqldrv.ParseDSN(Need(tb, MySQLDSN))
	if err != nil {
		tb.Fatalf("%s: %v", MySQLDSN, err)
	}
	ca, err := os.ReadFile(Need(tb, MySQLTLSCA))
	if err != nil {
		tb.Fatal(err)
	}
	mysqlTLSOnce.Do(func() {
		pool := func(pem []byte) *x509.CertPool {
			p := x509.NewCertPool()
			p.AppendCertsFromPEM(pem)
			return p
		}
		for name, c := range map[string]*tls.Config{
			MySQLTLSVerify:    {RootCAs: pool(ca), ServerName: "localhost"},
			MySQLTLSUntrusted: {RootCAs: pool(untrustedCA(tb)), ServerName: "localhost"},
			MySQLTLSWrongHost: {RootCAs: pool(ca)},
		} {
			c.MinVersion = tls.VersionTLS12
			if err := mysqldrv.RegisterTLSConfig(name, c); err != nil {
				tb.Fatal(err)
			}
		}
	})
	adm := cfg.Clone()
	adm.DBName = ""
	conn, err := sql.Open("mysql", adm.FormatDSN())
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	for _, stmt := range []string{
		"CREATE USER IF NOT EXISTS '" + TLSOnlyUser + "'@'127.0.0.1' REQUIRE SSL",
		"GRANT ALL ON *.* TO '" + TLSOnlyUser + "'@'127.0.0.1'",
	} {
		if _, err := conn.Exec(stmt); err != nil {
			tb.Fatalf("%s: %v", stmt, err)
		}
	}
	c := cfg.Clone()
	c.User, c.Passwd, c.DBName = TLSOnlyUser, "", db
	c.ParseTime, c.Loc = true, time.UTC
	c.TLSConfig = tlsName
	return c.FormatDSN()
}

// PostgresTLSOnlyRole creates TLSOnlyUser on the PostgreSQL test server (a superuser, so that
// it may replicate and use every test's schema), and does nothing when it exists: tests of
// several packages run it at once.
const PostgresTLSOnlyRole = `DO $$ BEGIN
	CREATE ROLE ` + TLSOnlyUser + ` LOGIN SUPERUSER;
EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
END $$`
