// Command kafka runs a local Apache Kafka broker (KRaft, one node, on
// loopback) for a trial of Tsubame's access-log shipper, and reads what the
// shipper sent. It is a trial tool, not a way to run Kafka in production.
//
//	go run ./tools/kafka serve [-port 9092] [-dir ./kafka-data] [-topic tsubame-access] [-partitions 3]
//	go run ./tools/kafka consume [-brokers 127.0.0.1:9092] [-topic tsubame-access] [-ids]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/twmb/franz-go/pkg/kgo"

	"tsubame/internal/kafkatest"
	"tsubame/internal/logship"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kafka serve|consume [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(ctx, os.Args[2:])
	case "consume":
		err = consume(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: serve or consume", os.Args[1])
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "kafka:", err)
		os.Exit(1)
	}
}

func serve(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	port := fs.Int("port", 9092, "client port on 127.0.0.1")
	dir := fs.String("dir", "./kafka-data", "the broker's configuration and data (kept between runs)")
	topic := fs.String("topic", "tsubame-access", "topic to create")
	partitions := fs.Int("partitions", 3, "the topic's partitions")
	_ = fs.Parse(args)
	b, err := kafkatest.Start(ctx, kafkatest.Options{Dir: *dir, Port: *port})
	if err != nil {
		return err
	}
	defer b.Stop()
	if err := b.CreateTopic(ctx, *topic, *partitions); err != nil {
		return err
	}
	fmt.Printf(`Kafka is up at %[1]s (topic %[2]s, %[3]d partitions; data in %[4]s). Ctrl-C stops it.

Ship the access log to it:
    TSUBAME_ACCESS_LOG_KAFKA_BROKERS=%[1]s TSUBAME_ACCESS_LOG_KAFKA_TOPIC=%[2]s make run
Read what arrives:
    go run ./tools/kafka consume -brokers %[1]s -topic %[2]s
`, b.Addr, *topic, *partitions, *dir)
	<-ctx.Done()
	fmt.Println("stopping Kafka")
	return nil
}

func consume(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("consume", flag.ExitOnError)
	brokers := fs.String("brokers", "127.0.0.1:9092", "a broker's host:port")
	topic := fs.String("topic", "tsubame-access", "topic to read from its start")
	ids := fs.Bool("ids", false, "print each record's partition, key and "+logship.IDHeader+" before its line")
	_ = fs.Parse(args)
	return kafkatest.Consume(ctx, *brokers, *topic, func(r *kgo.Record) bool {
		if *ids {
			id := ""
			for _, h := range r.Headers {
				if h.Key == logship.IDHeader {
					id = string(h.Value)
				}
			}
			fmt.Printf("%d\t%s\t%s\t", r.Partition, r.Key, id)
		}
		fmt.Printf("%s\n", r.Value)
		return false
	})
}
