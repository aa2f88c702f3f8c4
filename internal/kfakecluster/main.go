// Command kfakecluster runs franz-go's kfake, an in-memory Kafka-protocol cluster, as its own
// process so that clients other than the tests' (kcat) can reach it. It is the Kafka broker of
// the test suite (scripts/lib/kafka.sh starts it): no Apache Kafka distribution can be
// installed where the tests run.
//
//	kfakecluster -ports 9092,9093,9094 [-partitions 6]
//
// It listens on 127.0.0.1 with one broker per port, prints the comma-separated broker addresses
// on one line of standard output once they accept connections, and runs until SIGTERM or
// SIGINT. Topics are created with CreateTopics (kadm, kcat cannot) or automatically on first
// use with -partitions partitions.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	ports := flag.String("ports", "", "comma-separated loopback ports, one broker each (required)")
	partitions := flag.Int("partitions", 6, "partitions of auto-created topics")
	flag.Parse()
	var ps []int
	for _, s := range strings.Split(*ports, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || p < 1 || p > 65535 {
			fmt.Fprintf(os.Stderr, "kfakecluster: bad -ports %q\n", *ports)
			os.Exit(2)
		}
		ps = append(ps, p)
	}
	c, err := kfake.NewCluster(
		kfake.Ports(ps...),
		kfake.NumBrokers(len(ps)),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(*partitions),
	)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfakecluster: %v\n", err)
		os.Exit(1)
	}
	fmt.Println(strings.Join(c.ListenAddrs(), ","))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	c.Close()
}
