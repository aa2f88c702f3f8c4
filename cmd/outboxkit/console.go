package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/bcrypt"

	"github.com/outboxkit/outbox/internal/console"
	"github.com/outboxkit/outbox/internal/secret"
)

// consoleLong is console's --help.
const consoleLong = `Serve the operator console of an outbox in the browser (docs/console.md): the overview
(pending, parked, blocked, oldest age, publish rate and ETA per destination, publisher, CDC
checkpoint, charts of the last hour), the lane grid, the parked keys (search, unpark one, a
selection or all matching, after a dry-run count), replay (preview, then confirm) and the audit
log. Every action is written to the audit table with the user's name, in the transaction of the
change, as the operator commands do.

--auth names a YAML file of users (bcrypt password hashes) and bearer tokens, each a viewer (reads)
or an operator (also acts). Without it the pages are read-only and anonymous, and the console
refuses to listen beyond loopback (127.0.0.1, ::1, localhost). --tls-cert and --tls-key serve
HTTPS (and mark the session cookie Secure). SIGINT or SIGTERM stops gracefully.`

// consoleShutdown bounds the graceful stop of the console's server.
const consoleShutdown = 10 * time.Second

func consoleCommand() *cobra.Command {
	var listen, authFile, tlsCert, tlsKey string
	var sample time.Duration
	var f *dbFlags
	cmd := &cobra.Command{
		Use:   "console --db URL [--listen ADDR] [--auth FILE] [--tls-cert F --tls-key F]",
		Short: "serve the operator console in the browser: overview, lanes, parked keys (unpark), replay and the audit log",
		Long:  consoleLong,
		Args:  cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case (tlsCert == "") != (tlsKey == ""):
				return usageErr(cmd, "--tls-cert and --tls-key go together")
			case sample < time.Second:
				return usageErr(cmd, "--sample-interval: must be at least 1s, got %s", sample)
			}
			if _, _, err := net.SplitHostPort(listen); err != nil {
				return usageErr(cmd, "--listen: want HOST:PORT (127.0.0.1:8080), got %q", listen)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.config(cmd)
			if err != nil {
				return err
			}
			var auth console.Auth
			if authFile != "" {
				if auth, err = console.LoadAuth(authFile); err != nil {
					return usageErr(cmd, "--auth: %v", err)
				}
			}
			// Nothing written from here on shows a token of the auth file (the --db password is
			// masked by config).
			var tokens []string
			for _, t := range auth.Tokens {
				tokens = append(tokens, t.Token, os.Getenv(t.TokenEnv))
			}
			cmd.SetOut(secret.NewWriter(cmd.OutOrStdout(), tokens...))
			cmd.SetErr(secret.NewWriter(cmd.ErrOrStderr(), tokens...))
			if err := console.CheckListen(listen, auth); err != nil {
				return usageErr(cmd, "--listen: %v", err)
			}
			var tlsCfg *tls.Config
			if tlsCert != "" {
				pair, err := tls.LoadX509KeyPair(tlsCert, tlsKey)
				if err != nil {
					return usageErr(cmd, "--tls-cert/--tls-key: %v", err)
				}
				tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return failErr(cmd, fmt.Errorf("--listen: %w", err))
			}
			defer ln.Close()
			ctx := cmd.Context()
			db, err := openExisting(ctx, cfg)
			if err != nil {
				return failErr(cmd, err)
			}
			defer db.Close()
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			c, err := console.New(ctx, db, &console.Options{Auth: auth, SecureCookies: tlsCfg != nil, SampleInterval: sample, Logger: log})
			if err != nil {
				return failErr(cmd, err)
			}
			defer c.Close()
			srv := &http.Server{Handler: c, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: time.Minute,
				IdleTimeout: 2 * time.Minute, TLSConfig: tlsCfg, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
			scheme := "http"
			if tlsCfg != nil {
				scheme = "https"
				ln = tls.NewListener(ln, tlsCfg)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "console listening on %s://%s/\n", scheme, ln.Addr())
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ln) }()
			select {
			case err := <-done:
				if !errors.Is(err, http.ErrServerClosed) {
					return failErr(cmd, err)
				}
				return nil
			case <-ctx.Done():
			}
			log.Info("console_stopping")
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), consoleShutdown)
			defer cancel()
			if err := srv.Shutdown(sctx); err != nil {
				return failErr(cmd, fmt.Errorf("stop: %w", err))
			}
			return nil
		},
	}
	cmd.AddCommand(hashPasswordCommand())
	f = addOpenFlags(cmd)
	fl := cmd.Flags()
	fl.StringVar(&listen, "listen", "127.0.0.1:8080", "address to serve the console on (HOST:PORT); beyond loopback only with --auth")
	fl.StringVar(&authFile, "auth", "", "YAML file of users (bcrypt password hashes) and bearer tokens with their roles, viewer or operator (docs/console.md)")
	fl.StringVar(&tlsCert, "tls-cert", "", "PEM certificate file: serve HTTPS (with --tls-key)")
	fl.StringVar(&tlsKey, "tls-key", "", "PEM private key file of --tls-cert")
	fl.DurationVar(&sample, "sample-interval", console.DefaultSampleInterval, "how often the overview's charts sample the backlog and the publish rate (at least 1s)")
	return cmd
}

// hashPasswordCommand is `outboxkit console hash-password`: the bcrypt hash of a password read
// from standard input, for the auth file's password_hash.
func hashPasswordCommand() *cobra.Command {
	var cost int
	cmd := &cobra.Command{
		Use:   "hash-password [--cost N] < PASSWORD_FILE",
		Short: "print the bcrypt hash of the password on standard input's first line, for password_hash in the console's auth file",
		Args:  cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if cost < 10 || cost > bcrypt.MaxCost {
				return usageErr(cmd, "--cost: want 10 to %d, got %d", bcrypt.MaxCost, cost)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			line, err := bufio.NewReader(io.LimitReader(cmd.InOrStdin(), 1024)).ReadString('\n')
			if err != nil && !errors.Is(err, io.EOF) {
				return failErr(cmd, err)
			}
			pw := strings.TrimRight(line, "\r\n")
			switch {
			case pw == "":
				return usageErr(cmd, "give the password on standard input (printf '%%s\\n' PASSWORD | outboxkit console hash-password)")
			case len(pw) > 72:
				return usageErr(cmd, "the password is longer than 72 bytes, bcrypt's limit")
			}
			h, err := bcrypt.GenerateFromPassword([]byte(pw), cost)
			if err != nil {
				return failErr(cmd, err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), string(h))
			return nil
		},
	}
	cmd.Flags().IntVar(&cost, "cost", 12, "bcrypt cost (10 to 31; each step doubles the work of a login)")
	return cmd
}
