package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"tsubame"
	"tsubame/internal/clickhousetest"
	"tsubame/internal/kafkatest"
)

// The reports at scale: a server ships its JSON access log to the real
// Kafka broker, ClickHouse reads the topic through deploy/clickhouse's
// schema (Kafka engine, materialized views, a deduplicating events table).
// Per line item, ClickHouse's decisions, impressions, clicks and spend
// equal the valid events the files hold, and `tsubame report`, and so do
// the ad requests' slots (the row without a line item); the refused
// URLs equal the files' too; with every event stored twice, FINAL still
// counts each once.
func TestClickHouseFromKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Kafka, ClickHouse and the real binary; skipped in -short mode")
	}
	ch := clickhousetest.Start(t)
	version, _ := ch.Version()
	t.Logf("ClickHouse %s", version)
	ctx := context.Background()
	b, err := kafkatest.Start(ctx, kafkatest.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop() })
	if err := b.CreateTopic(ctx, "tsubame-access", 2); err != nil {
		t.Fatal(err)
	}
	schema, err := os.ReadFile("../../deploy/clickhouse/schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	ddl := strings.NewReplacer("{kafka_brokers}", b.Addr, "{kafka_topic}", "tsubame-access").Replace(string(schema))
	if err := ch.Exec(ddl); err != nil {
		t.Fatal(err)
	}

	dataDir, logDir := t.TempDir(), t.TempDir()
	env := []string{"TSUBAME_DATA_DIR=" + dataDir, "TSUBAME_ACCESS_LOG_DIR=" + logDir, "TSUBAME_ACCESS_LOG_FORMAT=json",
		"TSUBAME_ACCESS_LOG_KAFKA_BROKERS=" + b.Addr, "TSUBAME_ACCESS_LOG_KAFKA_TOPIC=tsubame-access",
		"TSUBAME_ACCESS_LOG_KAFKA_NODE_ID=node-1"}
	p := startWrapped(t, nil, env...)
	tr := newReportTraffic()
	tr.send(t, p.base, 60)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t); err != nil {
		t.Fatalf("stop: %v\n%s", err, p.logs)
	}
	// What ClickHouse must hold: the files' valid events, per line item.
	var set tsubame.CampaignSet
	if err := json.Unmarshal(demoCampaigns, &set); err != nil {
		t.Fatal(err)
	}
	cpm := map[string]int64{}
	for _, l := range set.LineItems {
		cpm[l.ID] = int64(l.CPM)
	}
	want := map[string]string{"": fmt.Sprintf("0 0 0 0 %d", tr.requests)} // the requests have no line item
	for li, n := range tr.decisions {
		want[li] = fmt.Sprintf("%d %d %d %d 0", n, tr.imps[li], tr.clicks[li], cpm[li]*tr.imps[li])
	}
	query := `SELECT line_item, countIf(event = 'decision'), countIf(event IN ('imp', 'bill') AND valid = 1 AND late = 0),
		countIf(event = 'click' AND valid = 1), sumIf(price, event IN ('imp', 'bill') AND valid = 1 AND late = 0),
		sumIf(slots, event = 'request')
		FROM tsubame.events FINAL GROUP BY line_item ORDER BY line_item`
	var got map[string]string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := ch.Query(query)
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]string{}
		// The row without a line item starts with a tab: trim the end only.
		for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
			if f := strings.Split(line, "\t"); len(f) == 6 {
				got[f[0]] = strings.Join(f[1:], " ")
			}
		}
		// The refused URLs are request lines, read into their own table by
		// their own view: waited for too.
		rejected, err := ch.Query("SELECT count() FROM tsubame.rejected")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(rejected))
		if fmt.Sprint(got) == fmt.Sprint(want) && int64(n) == tr.rejected[""] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ClickHouse holds %v and %d refused URLs, the files %v and %d", got, n, want, tr.rejected[""])
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Every event again, as Kafka's at-least-once delivery or a shipper
	// that lost its state file would bring them: the same rows twice.
	// FINAL keeps one of each (and the valid one of a repeat's id).
	if _, err := ch.Query("INSERT INTO tsubame.events SELECT * FROM tsubame.events"); err != nil {
		t.Fatal(err)
	}
	raw, _ := ch.Query("SELECT count() FROM tsubame.events")
	final, _ := ch.Query("SELECT count() FROM tsubame.events FINAL")
	t.Logf("events: %s rows stored, %s after deduplication", strings.TrimSpace(raw), strings.TrimSpace(final))
	out, err := ch.Query(query)
	if err != nil {
		t.Fatal(err)
	}
	again := map[string]string{}
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if f := strings.Split(line, "\t"); len(f) == 6 {
			again[f[0]] = strings.Join(f[1:], " ")
		}
	}
	if fmt.Sprint(again) != fmt.Sprint(want) {
		t.Errorf("with every event stored twice, ClickHouse (FINAL) says %v, the files %v", again, want)
	}

	// reports.sql, as shipped, over the whole day.
	sql, err := os.ReadFile("../../deploy/clickhouse/reports.sql")
	if err != nil {
		t.Fatal(err)
	}
	day := time.Now().UTC()
	stmts := clickhousetest.Statements(strings.NewReplacer("{from}", day.Add(-24*time.Hour).Format(time.DateTime),
		"{to}", day.Add(time.Hour).Format(time.DateTime), "{tz}", "Asia/Tokyo").Replace(string(sql)))
	if len(stmts) != 1 {
		t.Fatalf("reports.sql holds %d statements", len(stmts))
	}
	out, err = ch.Query(stmts[0] + " FORMAT JSONEachRow")
	if err != nil {
		t.Fatal(err)
	}
	perLine := map[string]int64{}
	var requests int64
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r struct {
			LineItem    string      `json:"line_item"`
			Impressions json.Number `json:"impressions"`
			Requests    json.Number `json:"requests"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		n, _ := r.Impressions.Int64()
		perLine[r.LineItem] += n
		n, _ = r.Requests.Int64()
		requests += n
	}
	for li, n := range tr.imps {
		if perLine[li] != n {
			t.Errorf("reports.sql: %s has %d impressions, the files %d", li, perLine[li], n)
		}
	}
	if requests != tr.requests {
		t.Errorf("reports.sql: %d requests, %d sent", requests, tr.requests)
	}

	// The same from tsubame report.
	code, out, errOut := runCmd(t, append([]string{"TSUBAME_ADMIN_LISTEN="}, env...), "", "report", "-by", "line_item", "-format", "json")
	if code != 0 {
		t.Fatalf("report: %d %s", code, errOut)
	}
	tr.check(t, decodeRows(t, out))
}
