package kafkatest

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The broker takes records from the idempotent producer (acks=all), hands
// them to a consumer, and keeps them across a restart.
func TestBrokerKeepsRecordsAcrossRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kafka broker; skipped in -short mode")
	}
	ctx := context.Background()
	b, err := Start(ctx, Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop() })
	if err := b.CreateTopic(ctx, "t", 3); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	produce(t, b.Addr, 0, n)
	if got := consume(t, b.Addr, n); len(got) != n {
		t.Fatalf("consumed %d of %d", len(got), n)
	}
	b.Kill()
	if err := b.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	produce(t, b.Addr, n, 2*n)
	got := consume(t, b.Addr, 2*n)
	for i := range 2 * n {
		if !got[fmt.Sprint(i)] {
			t.Fatalf("record %d missing after the restart (%d consumed)", i, len(got))
		}
	}
}

func produce(t *testing.T, addr string, from, to int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rs []*kgo.Record
	for i := from; i < to; i++ {
		rs = append(rs, kgo.StringRecord(fmt.Sprint(i)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func consume(t *testing.T, addr string, want int) map[string]bool {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for len(got) < want && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { got[string(r.Value)] = true })
	}
	return got
}

// A cluster id starting with '-' is taken by the storage tool for an
// option and the broker never starts: ids are drawn until they do not.
// 10,000 draws meet such an id with a chance of 1 - (63/64)^10000 if the
// rule were lost.
func TestClusterIDIsNotAnOption(t *testing.T) {
	for range 10000 {
		id := clusterID()
		if id[0] == '-' || len(id) != 22 {
			t.Fatalf("cluster id %q", id)
		}
		if b, err := base64.RawURLEncoding.DecodeString(id); err != nil || len(b) != 16 {
			t.Fatalf("cluster id %q is not 16 bytes of URL-safe base64: %v", id, err)
		}
	}
}
