package daemon

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// tlsFiles is the TLS configuration of a sink's tls keys (prefix: "sinks.kafka.tls"), reading
// its files: caFile, PEM CAs (default the system's); certFile and keyFile, a client certificate
// (both or neither); serverName, the name verified in the server's certificate (default the
// host dialled). Each problem names its key.
func tlsFiles(prefix, caFile, certFile, keyFile, serverName string) (*tls.Config, []string) {
	var p []string
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		switch {
		case err != nil:
			p = append(p, fmt.Sprintf("%s.ca_file: %v", prefix, err))
		default:
			c.RootCAs = x509.NewCertPool()
			if !c.RootCAs.AppendCertsFromPEM(pem) {
				p = append(p, prefix+".ca_file: no PEM certificate in "+caFile)
			}
		}
	}
	switch {
	case certFile == "" && keyFile == "":
	case certFile == "":
		p = append(p, prefix+".cert_file: required with tls.key_file")
	case keyFile == "":
		p = append(p, prefix+".key_file: required with tls.cert_file")
	default:
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			p = append(p, fmt.Sprintf("%s.cert_file: %v", prefix, err))
		} else {
			c.Certificates = []tls.Certificate{cert}
		}
	}
	return c, p
}
