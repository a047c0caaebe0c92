// Command apicount is a counting proxy for the Docker Engine API: it listens on a unix socket,
// forwards every request to the daemon's socket and appends one line per request to a log
// (route with ids folded, status, milliseconds, start as Unix seconds). `apicount -sum LOG` prints the count and total
// latency per route. bench/docker/cli.sh (CALLS=1) uses it to count the API calls per container of
// `sysbox apply`/`destroy` and of the docker CLI loops they are compared with.
//
//	apicount -listen /tmp/p.sock -upstream /var/run/docker.sock -log /tmp/calls.log &
//	DOCKER_HOST=unix:///tmp/p.sock sysbox apply -auto-approve
//	apicount -sum /tmp/calls.log
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "", "unix socket to serve")
	upstream := flag.String("upstream", "/var/run/docker.sock", "the daemon's unix socket")
	logPath := flag.String("log", "", "file to append one line per request to")
	sum := flag.String("sum", "", "print the per-route summary of this log and exit")
	flag.Parse()
	var err error
	if *sum != "" {
		err = summarize(*sum)
	} else {
		err = serve(*listen, *upstream, *logPath)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "apicount:", err)
		os.Exit(1)
	}
}

func serve(listen, upstream, logPath string) error {
	if listen == "" || logPath == "" {
		return errors.New("-listen and -log are required")
	}
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	_ = os.Remove(listen)
	ln, err := net.Listen("unix", listen)
	if err != nil {
		return err
	}
	var mu sync.Mutex // one unbuffered write per line: a reader may count lines at any time
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(&url.URL{Scheme: "http", Host: "docker"})
			r.Out.Host = r.In.Host
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", upstream)
		}},
		FlushInterval: -1, // streams (logs, events, attach) pass through as they come
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: rw, status: http.StatusOK}
		proxy.ServeHTTP(sw, r)
		line := fmt.Sprintf("%s %s %d %.3f %.3f\n", r.Method, route(r.URL.Path), sw.status, float64(time.Since(start).Microseconds())/1000, float64(start.UnixMicro())/1e6)
		mu.Lock()
		defer mu.Unlock()
		if _, err := logf.WriteString(line); err != nil {
			fmt.Fprintln(os.Stderr, "apicount: log:", err)
		}
	})}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-stop
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	err = srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// statusWriter remembers the status code; it passes hijacking through (attach and exec upgrade
// the connection).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) { s.status = code; s.ResponseWriter.WriteHeader(code) }

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

var (
	versionRE = regexp.MustCompile(`^/v[0-9.]+`)
	// The object name or id after these collections is folded to {id}.
	objectRE = regexp.MustCompile(`^/(containers|images|networks|volumes|exec)/([^/]+)`)
)

// route folds a request path to its API route: no version prefix, object ids and names as {id}.
func route(path string) string {
	p := versionRE.ReplaceAllString(path, "")
	return objectRE.ReplaceAllStringFunc(p, func(m string) string {
		parts := strings.SplitN(m[1:], "/", 2)
		switch parts[1] {
		case "create", "json", "prune", "load", "import", "search":
			return m // a collection verb, not an object
		}
		return "/" + parts[0] + "/{id}"
	})
}

// summarize prints, per "METHOD route", the number of calls and their summed milliseconds, then
// the total.
func summarize(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	type agg struct {
		n  int
		ms float64
	}
	by := map[string]*agg{}
	total := agg{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 4 && len(fs) != 5 { // the fifth field, the start time, came later
			return fmt.Errorf("%s: malformed line %q", path, sc.Text())
		}
		ms, err := strconv.ParseFloat(fs[3], 64)
		if err != nil {
			return fmt.Errorf("%s: line %q: %w", path, sc.Text(), err)
		}
		k := fs[0] + " " + fs[1]
		if by[k] == nil {
			by[k] = &agg{}
		}
		by[k].n++
		by[k].ms += ms
		total.n++
		total.ms += ms
	}
	if err := sc.Err(); err != nil {
		return err
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return by[keys[i]].n > by[keys[j]].n || by[keys[i]].n == by[keys[j]].n && keys[i] < keys[j]
	})
	for _, k := range keys {
		fmt.Printf("%6d %10.0f ms  %s\n", by[k].n, by[k].ms, k)
	}
	fmt.Printf("%6d %10.0f ms  total\n", total.n, total.ms)
	return nil
}
