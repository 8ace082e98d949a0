package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"tsubame/internal/config"
	"tsubame/internal/kafkatest"
	"tsubame/internal/logship"
)

// kafkaVariant: sample4 with the access log shipped to Kafka (a broker on
// the same box) against sample4 without the shipper.
var kafkaVariant = variant{
	Name:  "no-kafka",
	What:  "sample4 with the access log shipped to Kafka (`access_log.kafka`, a broker on this box) against sample4 without the shipper",
	Check: 0.95,
	Kafka: true,
	Base:  []string{"TSUBAME_ACCESS_LOG_KAFKA_BROKERS={kafka}"},
}

// shipLines is how many lines each round of the shipping scenario ships.
const shipLines = 1_000_000

// shipResult is one round of the shipping scenario.
type shipResult struct {
	Lines      uint64
	Seconds    float64
	ShipperCPU float64 // the shipper's process, % of one core
	BrokerCPU  float64 // the broker's, % of one core
}

func (r shipResult) rate() float64 { return float64(r.Lines) / r.Seconds }

// startKafka starts a broker for the Kafka scenarios, with the topic the
// shipper variant writes to.
func startKafka(ctx context.Context, dir string) (*kafkatest.Broker, error) {
	b, err := kafkatest.Start(ctx, kafkatest.Options{Dir: dir})
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	if err := b.CreateTopic(ctx, "tsubame-access", 3); err != nil {
		_ = b.Stop()
		return nil, err
	}
	return b, nil
}

// writeShipFiles writes shipLines access-log lines (LTSV as the server
// writes them, 1,000 placements) into four closed files under dir.
func writeShipFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	start := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	per := shipLines / 4
	for f := range 4 {
		from := start.Add(time.Duration(f) * 5 * time.Minute)
		name := fmt.Sprintf("access.%s-%s.log", from.Format("20060102T150405Z"), from.Add(5*time.Minute).Format("20060102T150405Z"))
		var b strings.Builder
		for i := range per {
			n := f*per + i
			t := from.Add(time.Duration(i) * 300 * time.Microsecond / 1)
			fmt.Fprintf(&b, "time:%s\thost:203.0.113.%d\tvhost:ads.example.com\tmethod:GET\turi:/api/sample4.js\tendpoint:sample4\tid:%d\tcallback:Example.process\tstatus:200\tsize:92\treqtime_microsec:%d\tua:Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36\treferer:https://news.example.com/articles/%d\treqid:b%08x\n",
				t.Format("2006-01-02T15:04:05.000000Z"), n%250, n%1000, 40+n%90, n%5000, n)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// shipRound ships the lines in src (linked into a fresh directory) to a
// fresh topic with the server's default shipper settings, and measures
// the time until Kafka acknowledged every line, and the CPU the shipper
// (this process) and the broker used meanwhile.
func shipRound(ctx context.Context, b *kafkatest.Broker, src, work string, round int) (shipResult, error) {
	dir := filepath.Join(work, fmt.Sprintf("ship-%d", round))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return shipResult{}, err
	}
	defer os.RemoveAll(dir)
	entries, err := os.ReadDir(src)
	if err != nil {
		return shipResult{}, err
	}
	for _, e := range entries {
		if err := os.Link(filepath.Join(src, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			return shipResult{}, err
		}
	}
	topic := fmt.Sprintf("ship-%d", round)
	if err := b.CreateTopic(ctx, topic, 3); err != nil {
		return shipResult{}, err
	}
	// The defaults of access_log.kafka (defaults.yaml).
	defaults, _, err := config.Load("", nil)
	if err != nil {
		return shipResult{}, err
	}
	k := defaults.AccessLog.Kafka
	codec, err := logship.Codec(k.Compression)
	if err != nil {
		return shipResult{}, err
	}
	s, err := logship.New(logship.Options{Dir: dir, Name: "access.log", Node: "bench", Topic: topic, ByPlacement: k.PartitionBy == "placement",
		Client: []kgo.Opt{kgo.SeedBrokers(b.Addr), kgo.ProducerBatchCompression(codec), kgo.ProducerBatchMaxBytes(int32(k.BatchBytes)),
			kgo.ProducerLinger(k.Linger), kgo.MaxBufferedRecords(k.BufferRecords)}})
	if err != nil {
		return shipResult{}, err
	}
	cpu0, bcpu0 := selfCPU(), procCPU(b.Pid())
	t0 := time.Now()
	s.Start()
	for s.Stats().Lines < shipLines {
		if err := ctx.Err(); err != nil {
			return shipResult{}, err
		}
		if time.Since(t0) > 5*time.Minute {
			return shipResult{}, fmt.Errorf("shipping: %d of %d lines acknowledged after 5 minutes (%+v)", s.Stats().Lines, shipLines, s.Stats())
		}
		time.Sleep(2 * time.Millisecond)
	}
	wall := time.Since(t0)
	r := shipResult{Lines: s.Stats().Lines, Seconds: wall.Seconds(),
		ShipperCPU: 100 * (selfCPU() - cpu0).Seconds() / wall.Seconds(),
		BrokerCPU:  100 * (procCPU(b.Pid()) - bcpu0).Seconds() / wall.Seconds()}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return r, s.Close(cctx)
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is a process's user and system CPU time, from /proc/PID/stat
// (0 if it cannot be read).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	var utime, stime int64
	fmt.Sscan(f[11], &utime)
	fmt.Sscan(f[12], &stime)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

// medianShip is the round with the median rate.
func medianShip(rs []shipResult) shipResult {
	sorted := slices.Clone(rs)
	slices.SortFunc(sorted, func(a, b shipResult) int { return cmp.Compare(a.rate(), b.rate()) })
	return sorted[len(sorted)/2]
}
