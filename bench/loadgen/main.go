// loadgen writes Pod status updates to a Kubernetes API server at a steady rate, for bench/latency.py.
//
// The background load of the latency benchmark must not take the CPU the API server needs: a Python
// client spends most of a core on 500 TLS requests a second, this one a small part of it.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	server := flag.String("server", "", "API server URL")
	ca := flag.String("ca", "", "CA certificate file")
	cert := flag.String("cert", "", "client certificate file")
	key := flag.String("key", "", "client key file")
	namespace := flag.String("namespace", "", "namespace of the Pods")
	prefix := flag.String("prefix", "noise-", "Pod name prefix")
	pods := flag.Int("pods", 200, "number of Pods, named prefix000 ...")
	rate := flag.Float64("rate", 500, "status writes per second")
	maxInflight := flag.Int("inflight", 256, "most writes waiting for an answer at once")
	flag.Parse()

	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(*ca)
	if err != nil {
		fail(err)
	}
	pool.AppendCertsFromPEM(caPEM)
	pair, err := tls.LoadX509KeyPair(*cert, *key)
	if err != nil {
		fail(err)
	}
	client := &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}},
			MaxIdleConnsPerHost: 64,
			ForceAttemptHTTP2:   true,
		},
	}

	var answered, failed atomic.Int64
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	tick := time.NewTicker(time.Duration(float64(time.Second) / *rate))
	defer tick.Stop()
	report := time.NewTicker(time.Second)
	defer report.Stop()
	inflight := make(chan struct{}, *maxInflight)
	var wg sync.WaitGroup
	for n := 0; ; n++ {
		select {
		case <-stop:
			wg.Wait()
			return
		case <-report.C:
			fmt.Printf("%d %d\n", answered.Load(), failed.Load())
		case <-tick.C:
			select {
			case inflight <- struct{}{}:
			default:
				continue // the server cannot keep up: do not pile up more
			}
			wg.Add(1)
			go func(n int) {
				defer wg.Done()
				defer func() { <-inflight }()
				ready, restarts := "True", 0
				if (n / *pods)%2 == 1 {
					ready, restarts = "False", 1
				}
				body := fmt.Sprintf(`{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"%s"}],`+
					`"containerStatuses":[{"name":"main","image":"registry.invalid/worker:1","imageID":"",`+
					`"ready":%t,"restartCount":%d,"state":{"running":{"startedAt":"2026-12-01T00:00:00Z"}}}]}}`,
					ready, ready == "True", restarts)
				url := fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s%03d/status", *server, *namespace, *prefix, n%*pods)
				request, _ := http.NewRequest(http.MethodPatch, url, bytes.NewBufferString(body))
				request.Header.Set("Content-Type", "application/merge-patch+json")
				// as a kubelet does: built-in types come back as protobuf, which costs the server less than JSON
				request.Header.Set("Accept", "application/vnd.kubernetes.protobuf")
				response, err := client.Do(request)
				if err != nil {
					failed.Add(1)
					return
				}
				_, _ = io.Copy(io.Discard, response.Body)
				response.Body.Close()
				if response.StatusCode < 300 {
					answered.Add(1)
				} else {
					failed.Add(1)
				}
			}(n)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "loadgen:", err)
	os.Exit(1)
}
