// Command ceiling issues, for every Foo, the writes a Foo controller issues — create the Foo's
// Deployment, then patch the Foo's status — and nothing else: no informer, no cache, no
// re-reads, no client-side rate limit. It learns of Foos from one paged LIST and then a plain
// WATCH (so it serves the burst scenario too), and handles each Foo once, on a fixed number of
// workers. Its time to converge is the fastest this API server on this machine can take a
// controller's writes: the ceiling the other contenders are measured against.
//
// With -ours it issues our operator's three writes instead: the Deployment, the status by
// server-side apply with a Ready condition, and an events.k8s.io Event: the same work as ours
// with its Events all written, so that ours is measured against a ceiling doing its own work.
//
// With -ours-status it issues ours' writes but the Event, to tell what the status and the Event
// each cost. With -ours-status-merge it writes that same status (the condition included) by a
// JSON merge patch instead of server-side apply, to tell the apply's cost from the condition's.
//
// Usage: ceiling -kubeconfig PATH [-concurrency N] [-namespace NS]
// [-ours | -ours-status | -ours-status-merge]
package main

import (
	"context"
	"flag"
	"log"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "Path to a kubeconfig.")
	concurrency := flag.Int("concurrency", defaultConcurrency,
		"How many Foos are handled at once; the benchmark sets it to our operator's concurrency.")
	namespace := flag.String("namespace", "", "Only Foos of this namespace; all namespaces when empty.")
	ours := flag.Bool("ours", false, "Issue our operator's three writes (Deployment, status with a condition, Event).")
	oursStatus := flag.Bool("ours-status", false, "Issue our operator's writes without the Event (Deployment, status with a condition).")
	oursStatusMerge := flag.Bool("ours-status-merge", false,
		"As -ours-status, the status written by a JSON merge patch instead of server-side apply.")
	flag.Parse()
	if countTrue(*ours, *oursStatus, *oursStatusMerge) > 1 {
		log.Fatalf("-ours, -ours-status and -ours-status-merge are alternatives; give one")
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatalf("kubeconfig: %v", err)
	}
	status := mergedStatus
	switch {
	case *ours || *oursStatus:
		status = oursAppliedStatus
	case *oursStatusMerge:
		status = oursMergedStatus
	}
	w, err := newWriter(unlimited(config), status, *ours)
	if err != nil {
		log.Fatalf("clients: %v", err)
	}

	foos := make(chan fooRef, 1024)
	var done atomic.Int64
	var workers sync.WaitGroup
	for range *concurrency {
		workers.Go(func() {
			for foo := range foos {
				handle(ctx, w, foo)
				done.Add(1)
			}
		})
	}
	go reportProgress(ctx, &done)

	err = discoverFoos(ctx, w.foos, *namespace, foos)
	close(foos)
	workers.Wait()
	if err != nil && ctx.Err() == nil {
		log.Fatalf("watching Foos: %v", err)
	}
}

func countTrue(flags ...bool) int {
	n := 0
	for _, f := range flags {
		if f {
			n++
		}
	}
	return n
}

// defaultConcurrency stands for our operator's default number of concurrent reconciles; the
// benchmark always passes -concurrency explicitly.
const defaultConcurrency = 16

// unlimited turns client-go's client-side rate limit (5 QPS, burst 10 by default) off, so the
// API server alone sets the pace.
func unlimited(config *rest.Config) *rest.Config {
	config = rest.CopyConfig(config)
	config.QPS = -1
	config.Burst = 1 << 20
	return config
}

// handle retries a Foo's writes until they succeed or the command stops: the ceiling must not
// finish early by skipping a Foo the API server refused for a moment (429, timeout).
func handle(ctx context.Context, w *writer, foo fooRef) {
	for ctx.Err() == nil {
		err := w.converge(ctx, foo)
		if err == nil {
			return
		}
		log.Printf("%s/%s: %v; retrying", foo.namespace, foo.name, err)
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func reportProgress(ctx context.Context, done *atomic.Int64) {
	ticker := time.NewTicker(5 * time.Second)
	defer ticker.Stop()
	last := int64(-1)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			if n := done.Load(); n != last {
				log.Printf("%d Foos written", n)
				last = n
			}
		}
	}
}
