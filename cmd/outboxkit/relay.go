package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox/internal/daemon"
)

func relayCommand() *cobra.Command {
	var configPath string
	cmd := &cobra.Command{
		Use:   "relay --config FILE",
		Short: "run the relays of one outbox from a configuration file",
		Long: `Run polling or CDC relays for one outbox, publishing to SQS, SNS, Kafka, RabbitMQ, NATS JetStream,
Redis streams, HTTP webhooks or standard output (sink stdout: one CloudEvents JSON line per
message; the logs always go to standard error), with
/healthz, /readyz and /metrics (Prometheus) on http.listen. docs/daemon.md is the reference of
every key. Every configuration key can be set in the file, by
the environment variable OUTBOXKIT_<KEY> and by the flag below; a flag wins over the
environment, which wins over the file. SIGTERM or SIGINT stops gracefully within
--shutdown-timeout. A bad configuration (what the relay or the adapter would refuse at start
included) prints one line per bad key and exits with status 2, before anything is opened; an
http.listen that cannot be bound exits 1 before the database is opened.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := daemon.Load(configPath, os.Getenv, cmd.Flags())
			if err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), err)
				return &exitError{code: 2}
			}
			// The logs and messages never show a configured secret (a database password,
			// broker credentials, signing secrets).
			cmd.SetErr(daemon.Output(cfg, cmd.ErrOrStderr()))
			log := daemon.NewLogger(cfg.Log, cmd.ErrOrStderr())
			if mode, exposed := daemon.ExposedConfig(configPath, cfg); exposed {
				log.Warn("config_file_exposed", "path", configPath, "mode", mode.String(),
					"remedy", "the file holds a secret and others may read it: chmod 600 it, or pass the secret by environment (docs/daemon.md)")
			}
			ctx := cmd.Context()
			d, err := daemon.New(ctx, cfg, log, cmd.OutOrStdout())
			if err != nil {
				log.Error("daemon_start_failed", "error", err)
				return &exitError{code: 1}
			}
			if err := d.Run(ctx); err != nil {
				log.Error("daemon_failed", "error", err)
				return &exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "YAML configuration file")
	daemon.Flags(cmd.Flags())
	return cmd
}
