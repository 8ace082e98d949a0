package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"tsubame/internal/certs"
	"tsubame/internal/config"
	"tsubame/internal/logship"
)

// kafkaClientOpts turns access_log.kafka into the Kafka client's options
// (the shipper adds the topic, acks and retries).
func kafkaClientOpts(k config.Kafka) ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(k.Brokers...),
		kgo.ClientID(k.ClientID),
		kgo.ProducerBatchMaxBytes(int32(k.BatchBytes)),
		kgo.ProducerLinger(k.Linger),
		kgo.MaxBufferedRecords(k.BufferRecords),
	}
	codec, err := logship.Codec(k.Compression)
	if err != nil {
		return nil, fmt.Errorf("access_log.kafka.compression: %w", err)
	}
	opts = append(opts, kgo.ProducerBatchCompression(codec))
	if k.TLS.Enabled {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: k.TLS.ServerName}
		if k.TLS.CAFile != "" {
			pool, err := certs.LoadCAPool(k.TLS.CAFile)
			if err != nil {
				return nil, fmt.Errorf("access_log.kafka.tls.ca_file: %w", err)
			}
			cfg.RootCAs = pool
		}
		if k.TLS.CertFile != "" {
			pair, err := tls.LoadX509KeyPair(k.TLS.CertFile, k.TLS.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("access_log.kafka.tls.cert_file and key_file: %w", err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	switch a := k.SASL; a.Mechanism {
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: a.Username, Pass: a.Password}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: a.Username, Pass: a.Password}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: a.Username, Pass: a.Password}.AsSha512Mechanism()))
	}
	return opts, nil
}

// kafkaNode is the node id in record ids: access_log.kafka.node_id or the
// host name.
func kafkaNode(k config.Kafka) (string, error) {
	if k.NodeID != "" {
		return k.NodeID, nil
	}
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "", fmt.Errorf("access_log.kafka.node_id is empty and the host name is unknown (%v): set it", err)
	}
	return h, nil
}

// newShipper makes the access log's Kafka shipper (not started).
func (m *Main) newShipper(al config.AccessLog) (*logship.Shipper, error) {
	k := al.Kafka
	opts, err := kafkaClientOpts(k)
	if err != nil {
		return nil, err
	}
	node, err := kafkaNode(k)
	if err != nil {
		return nil, err
	}
	if k.SASL.Mechanism != "" && !k.TLS.Enabled {
		m.Logger.Warn("access_log.kafka: SASL without TLS: the brokers' traffic (and the SCRAM exchange) is not encrypted")
	}
	return logship.New(logship.Options{
		Dir: al.Dir, Name: al.FileName, StateFile: al.KafkaStatePath(), Node: node, Topic: k.Topic,
		ByPlacement: k.PartitionBy == "placement", Client: opts,
		PollInterval: k.PollInterval, StateInterval: k.StateInterval,
		Written: func() uint64 { return m.logs.file.Stats().Written },
		Logger:  m.Logger.With("component", "kafka-shipper"),
	})
}

// watchShipLag warns (process log and admin.alert_webhook) when the oldest
// line not acknowledged by Kafka is older than access_log.kafka.lag_alert,
// and again when shipping has caught up. Serving does not depend on Kafka:
// readiness is unchanged.
func (m *Main) watchShipLag(ctx context.Context, limit time.Duration) {
	if limit <= 0 {
		return
	}
	every := min(limit/4, 10*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	alerting := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := m.logs.shipper.Stats()
		age := time.Duration(0)
		if !st.Oldest.IsZero() {
			age = time.Since(st.Oldest)
		}
		switch {
		case !alerting && age > limit:
			alerting = true
			m.Logger.Warn("access log lines are not reaching Kafka", "oldest_unshipped", age.Round(time.Second),
				"lag_lines", st.Lag, "last_error", st.LastErr)
			if m.adm.alerts != nil {
				m.adm.alerts.Notify("Access log shipping to Kafka is behind: the oldest unshipped line is %s old, %d lines waiting (%s). Lines are kept on disk until shipped.",
					age.Round(time.Second), st.Lag, st.LastErr)
			}
		case alerting && age <= limit/2:
			alerting = false
			m.Logger.Info("access log shipping to Kafka caught up", "lag_lines", st.Lag)
			if m.adm.alerts != nil {
				m.adm.alerts.Notify("Access log shipping to Kafka caught up (%d lines waiting).", st.Lag)
			}
		}
	}
}

// runLogShip ships given closed access-log files to Kafka once (backfill),
// with the ids the running shipper would give their lines.
func runLogShip(ctx context.Context, e *env, files []string) error {
	stdout := e.stdout
	cfg, err := e.load()
	if err != nil {
		return err
	}
	k := cfg.AccessLog.Kafka
	if !k.Enabled() {
		return usagef("access_log.kafka.brokers is empty: set it (or TSUBAME_ACCESS_LOG_KAFKA_BROKERS) to ship")
	}
	for _, f := range files {
		if filepath.Base(f) == cfg.AccessLog.FileName {
			return usagef("%s is the active file: only closed files are shipped by hand (the server ships the active one)", f)
		}
		if _, err := os.Stat(f); err != nil {
			return err
		}
	}
	opts, err := kafkaClientOpts(k)
	if err != nil {
		return err
	}
	node, err := kafkaNode(k)
	if err != nil {
		return err
	}
	client, err := logship.NewClient(k.Topic, opts...)
	if err != nil {
		return err
	}
	defer client.Close()
	// A wrong address or password would make the client retry forever:
	// ask the brokers first.
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = client.Ping(pctx)
	cancel()
	if err != nil {
		return fmt.Errorf("cannot reach Kafka at %s: %w", strings.Join(k.Brokers, ","), err)
	}
	shipped, skipped, err := logship.ShipFiles(ctx, client, node, k.PartitionBy == "placement", files)
	fmt.Fprintf(stdout, "shipped %d line(s) from %d file(s) to %s", shipped, len(files), k.Topic)
	if skipped > 0 {
		fmt.Fprintf(stdout, " (%d line(s) that are not records skipped)", skipped)
	}
	fmt.Fprintln(stdout)
	if err != nil {
		return fmt.Errorf("not every line was acknowledged (run it again: consumers drop repeated ids): %w", err)
	}
	return nil
}
