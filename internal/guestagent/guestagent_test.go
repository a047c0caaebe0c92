package guestagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pipeAgent serves a real Server on one end of a unix socket pair and returns a Stream client on
// the other.
func pipeAgent(t *testing.T, srv *Server) *Stream {
	t.Helper()
	a, b := unixPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, b) }()
	st := NewStream(a)
	t.Cleanup(func() {
		cancel()
		st.Close()
		b.Close()
		<-done
	})
	return st
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestClientAgainstServer(t *testing.T) {
	ctx := testCtx(t)
	c := NewClient(pipeAgent(t, &Server{Version: "test-1"}))
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if err := c.Sync(ctx, 1<<40+3); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if err := NewClient(replyTransport(`{"return":41}`)).Sync(ctx, 42); !errors.Is(err, ErrMalformed) {
		t.Fatalf("sync answered with another id: got %v, want ErrMalformed", err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	if info.Version != "test-1" || len(info.SupportedCommands) != len(Commands) {
		t.Fatalf("info: got %+v, want version test-1 and %d commands", info, len(Commands))
	}
	ifs, err := c.Interfaces(ctx)
	if err != nil {
		t.Fatalf("interfaces: %v", err)
	}
	var lo bool
	for _, i := range ifs {
		for _, a := range i.IPAddresses {
			if a.Address == "127.0.0.1" && a.Prefix == 8 && a.Type == "ipv4" {
				lo = true
			}
		}
	}
	if !lo {
		t.Fatalf("interfaces: got %+v, want one with 127.0.0.1/8", ifs)
	}
	err = c.Call(ctx, "guest-fsfreeze-freeze", nil, nil)
	var ae *Error
	if !errors.As(err, &ae) || ae.Class != ClassCommandNotFound {
		t.Fatalf("unknown command: got %v, want a CommandNotFound *Error", err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("ping after an error reply: %v", err)
	}
}

func TestExec(t *testing.T) {
	ctx := testCtx(t)
	c := NewClient(pipeAgent(t, &Server{MaxOutput: 1000}))
	code := func(n int) *int { return &n }
	for _, tc := range []struct {
		name    string
		args    ExecArgs
		out     string
		errOut  string
		code    *int
		signal  *int
		outTrnc bool
	}{
		{name: "input-data through cat", args: ExecArgs{Path: "cat", InputData: []byte("hello\x00\xff"), CaptureOutput: true}, out: "hello\x00\xff", code: code(0)},
		{name: "env replaces the environment", args: ExecArgs{Path: "/usr/bin/env", Env: []string{"A=1", "B=two"}, CaptureOutput: true}, out: "A=1\nB=two\n", code: code(0)},
		{name: "argv is not a shell line", args: ExecArgs{Path: "echo", Arg: []string{"$HOME;", "`x`"}, CaptureOutput: true}, out: "$HOME; `x`\n", code: code(0)},
		{name: "exit code and stderr", args: ExecArgs{Path: "sh", Arg: []string{"-c", "echo oops >&2; exit 3"}, CaptureOutput: true}, errOut: "oops\n", code: code(3)},
		{name: "signal", args: ExecArgs{Path: "sh", Arg: []string{"-c", "kill -9 $$"}, CaptureOutput: true}, signal: code(9)},
		{name: "output bounded", args: ExecArgs{Path: "head", Arg: []string{"-c", "5000", "/dev/zero"}, CaptureOutput: true}, out: strings.Repeat("\x00", 1000), code: code(0), outTrnc: true},
		{name: "no capture", args: ExecArgs{Path: "echo", Arg: []string{"x"}}, code: code(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := c.Exec(ctx, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			got := fmt.Sprintf("exited=%v out=%q err=%q code=%v signal=%v trunc=%v", st.Exited, st.OutData, st.ErrData, deref(st.ExitCode), deref(st.Signal), st.OutTruncated)
			want := fmt.Sprintf("exited=%v out=%q err=%q code=%v signal=%v trunc=%v", true, tc.out, tc.errOut, deref(tc.code), deref(tc.signal), tc.outTrnc)
			if got != want {
				t.Fatalf("got %s, want %s", got, want)
			}
		})
	}
	if _, err := c.Exec(ctx, ExecArgs{Path: "/nonexistent/binary"}); err == nil || !strings.Contains(err.Error(), "/nonexistent/binary") {
		t.Fatalf("missing binary: got %v, want an error naming it", err)
	}
	if _, err := c.Status(ctx, 999999999); err == nil {
		t.Fatal("status of an unknown pid: got no error")
	}
	if _, err := c.Run(ctx, "false"); err == nil || !strings.Contains(err.Error(), "exit code 1") {
		t.Fatalf("run false: got %v, want exit code 1", err)
	}
}

func deref(p *int) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}

func TestExecHonoursContext(t *testing.T) {
	srv := &Server{}
	c := NewClient(pipeAgent(t, srv))
	t.Cleanup(func() { // the guest process outlives the cancelled Exec: end it here
		srv.mu.Lock()
		defer srv.mu.Unlock()
		for pid := range srv.procs {
			_ = syscall.Kill(int(pid), syscall.SIGKILL)
		}
	})
	ctx, cancel := context.WithCancel(testCtx(t))
	time.AfterFunc(100*time.Millisecond, cancel) // while Exec polls
	_, err := c.Exec(ctx, ExecArgs{Path: "sleep", Arg: []string{"30"}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// replyTransport answers every request with a fixed reply.
type replyTransport string

func (r replyTransport) Command(context.Context, []byte) ([]byte, error) { return []byte(r), nil }

func TestMalformedRepliesRefused(t *testing.T) {
	for _, reply := range []string{
		``,
		`not json`,
		`[]`,
		`{}`,
		`{"return":{}, "error":{"class":"GenericError","desc":"x"}}`,
		`{"error":{"desc":"no class"}}`,
		`{"return":{}, "extra":1}`,
		`{"return":{}}{"return":{}}`,
		`{"return":null}`,
		`{"return":{"pid":"seven"}}`,
		`{"return":{"pid":0}}`,
		`{"return":{"pid":-4}}`,
	} {
		t.Run(reply, func(t *testing.T) {
			_, err := NewClient(replyTransport(reply)).Start(context.Background(), ExecArgs{Path: "true"})
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %v, want ErrMalformed", err)
			}
		})
	}
	_, err := NewClient(replyTransport(`{"return":{"exited":true}}`)).Status(context.Background(), 1)
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("exited without code: got %v, want ErrMalformed", err)
	}
	_, err = NewClient(replyTransport(`{"return":[{"name":"eth0","ip-addresses":"x"}]}`)).Interfaces(context.Background())
	if !errors.Is(err, ErrMalformed) {
		t.Fatalf("interfaces: got %v, want ErrMalformed", err)
	}
}

// unixPair returns the two ends of a connected unix socket: buffered, unlike net.Pipe, as the
// real transports are.
func unixPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := l.Accept(); ch <- res{c, err} }()
	a, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return a, r.c
}

// rawAgent runs fn as the agent's side of a pipe, with the client's side as a Stream.
func rawAgent(t *testing.T, fn func(c net.Conn)) *Stream {
	t.Helper()
	a, b := unixPair(t)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); fn(b) }()
	st := NewStream(a)
	t.Cleanup(func() { st.Close(); b.Close(); wg.Wait() })
	return st
}

// readRequest reads one newline-terminated request, dropping any 0xFF.
func readRequest(r io.ByteReader) (Request, error) {
	var line []byte
	for {
		b, err := r.ReadByte()
		if err != nil {
			return Request{}, err
		}
		if b == '\n' {
			break
		}
		if b != Sentinel {
			line = append(line, b)
		}
	}
	var req Request
	err := json.Unmarshal(line, &req)
	return req, err
}

type byteConn struct{ net.Conn }

func (c byteConn) ReadByte() (byte, error) {
	b := make([]byte, 1)
	_, err := io.ReadFull(c.Conn, b)
	return b[0], err
}

func TestStreamResyncSkipsGarbageAndStaleReplies(t *testing.T) {
	st := rawAgent(t, func(c net.Conn) {
		r := byteConn{c}
		req, err := readRequest(r)
		if err != nil || req.Execute != CmdSyncDelimited {
			return
		}
		var a SyncArgs
		_ = json.Unmarshal(req.Arguments, &a)
		// Garbage, a stale sync reply, a cut-off reply, then the real one.
		fmt.Fprintf(c, "garbage{\"return\":\n\xff{\"return\":12345}\n\xff{\"retu\xff{\"return\":%d}\n", a.ID)
		req, err = readRequest(r)
		if err != nil {
			return
		}
		fmt.Fprintf(c, "{\"return\":{\"echo\":%q}}\n", req.Execute)
	})
	var out map[string]string
	if err := NewClient(st).Call(testCtx(t), "guest-ping", nil, &out); err != nil {
		t.Fatal(err)
	}
	if out["echo"] != "guest-ping" {
		t.Fatalf("got %v, want the reply to guest-ping", out)
	}
}

func TestStreamResyncsAfterTimeout(t *testing.T) {
	// The agent answers the first command late: the client gives up, and the late reply must not
	// be taken for the answer to the next command.
	late := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(late) }) }
	st := rawAgent(t, func(c net.Conn) {
		r := byteConn{c}
		n := 0
		for {
			req, err := readRequest(r)
			if err != nil {
				return
			}
			switch req.Execute {
			case CmdSyncDelimited:
				var a SyncArgs
				_ = json.Unmarshal(req.Arguments, &a)
				fmt.Fprintf(c, "\xff{\"return\":%d}\n", a.ID)
			default:
				n++
				if n == 1 {
					<-late
				}
				fmt.Fprintf(c, "{\"return\":{\"n\":%d}}\n", n)
			}
		}
	})
	t.Cleanup(release) // runs before rawAgent's cleanup waits for the agent
	c := NewClient(st)
	ctx, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
	defer cancel()
	if err := c.Call(ctx, "first", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first: got %v, want DeadlineExceeded", err)
	}
	// The stale reply {"n":1} is written while the client is resyncing; it is skipped.
	go func() { time.Sleep(10 * time.Millisecond); release() }()
	var out map[string]int
	if err := c.Call(testCtx(t), "second", nil, &out); err != nil {
		t.Fatal(err)
	}
	if out["n"] != 2 {
		t.Fatalf("second: got %v, want n=2 (the reply to the second command)", out)
	}
}

func TestServerFraming(t *testing.T) {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&Server{}).Serve(ctx, b) }()
	t.Cleanup(func() { cancel(); a.Close(); <-done })
	go func() {
		// No newline between requests; a partial request dropped by 0xFF; garbage; ids echoed;
		// braces inside strings.
		io.WriteString(a, `{"execute":"guest-ping","id":"a"}{"execute":"guest-pi`+"\xff"+`{"execute":"guest-sync","arguments":{"id":7},"id":2}`+"junk\n"+`{"execute":"guest-sync-delimited","arguments":{"id":8}}{"execute":"guest-sync","arguments":{"id":"}{"}}{"execute":"guest-ping","bogus":1}`+"\n")
	}()
	r := byteConn{a}
	var got []string
	for range 6 {
		var line []byte
		for {
			c, err := r.ReadByte()
			if err != nil {
				t.Fatal(err)
			}
			if c == '\n' {
				break
			}
			line = append(line, c)
		}
		got = append(got, string(line))
	}
	want := []string{
		`{"return":{},"id":"a"}`,
		`{"return":7,"id":2}`,
		`{"error":{"class":"GenericError","desc":"invalid JSON input \"junk\""}}`,
		"\xff" + `{"return":8}`,
	}
	for i, w := range want {
		if got[i] != w {
			t.Errorf("reply %d: got %q, want %q", i, got[i], w)
		}
	}
	for i, frag := range map[int]string{4: `"GenericError"`, 5: `unknown field \"bogus\"`} {
		if !strings.Contains(got[i], frag) {
			t.Errorf("reply %d: got %q, want it to contain %q", i, got[i], frag)
		}
	}
}

// firecrackerSide listens on a unix socket as Firecracker's host-side vsock does: it reads
// "CONNECT <port>\n", answers "OK <hostport>\n" if port is the guest's, then hands the connection
// to the guest's listener (here: a Server).
func firecrackerSide(t *testing.T, guestPort uint32) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "v.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); l.Close(); wg.Wait() })
	srv := &Server{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				stop := context.AfterFunc(ctx, func() { c.Close() })
				defer stop()
				var port uint32
				if _, err := fmt.Fscanf(byteReader{c}, "CONNECT %d\n", &port); err != nil || port != guestPort {
					return // Firecracker closes the connection when nothing listens on the port
				}
				fmt.Fprintf(c, "OK %d\n", 1073741824)
				_ = srv.Serve(ctx, c)
			}()
		}
	}()
	return path
}

// byteReader reads one byte at a time, so Fscanf consumes only the handshake line.
type byteReader struct{ c net.Conn }

func (b byteReader) Read(p []byte) (int, error) { return b.c.Read(p[:1]) }

func TestFirecrackerVsockDial(t *testing.T) {
	ctx := testCtx(t)
	path := firecrackerSide(t, 52)
	conn, err := DialFirecrackerVsock(ctx, path, 52)
	if err != nil {
		t.Fatal(err)
	}
	st := NewStream(conn)
	defer st.Close()
	if _, err := NewClient(st).Run(ctx, "true"); err != nil {
		t.Fatalf("exec over the vsock stream: %v", err)
	}
	if c, err := DialFirecrackerVsock(ctx, path, 53); err == nil {
		c.Close()
		t.Fatal("connect to a port nobody listens on: got no error")
	} else if !strings.Contains(err.Error(), "port 53") {
		t.Fatalf("got %v, want an error naming port 53", err)
	}
}

func TestVsockHandshakeReplies(t *testing.T) {
	for reply, ok := range map[string]bool{
		"OK 1073741824\n":        true,
		"OK\n":                   false,
		"NOPE 5\n":               false,
		"OK x\n":                 false,
		"OK 1 2\n":               false,
		strings.Repeat("O", 100): false,
	} {
		a, b := net.Pipe()
		go func() {
			defer b.Close()
			buf := make([]byte, 64)
			_, _ = b.Read(buf)
			_, _ = io.WriteString(b, reply)
		}()
		err := vsockHandshake(a, 52)
		a.Close()
		if (err == nil) != ok {
			t.Errorf("reply %q: got %v, want ok=%v", reply, err, ok)
		}
	}
}

func TestStreamRefusesFramingInRequest(t *testing.T) {
	st := rawAgent(t, func(net.Conn) {})
	for _, req := range []string{"{\"execute\":\n\"x\"}", "{\"execute\":\"x\xff\"}"} {
		if _, err := st.Command(context.Background(), []byte(req)); !errors.Is(err, ErrMalformed) {
			t.Errorf("request %q: got %v, want ErrMalformed", req, err)
		}
	}
}

// scriptAgent answers guest-network-get-interfaces with ifaces and records guest-exec argv; an
// argv starting with failOn exits 2.
type scriptAgent struct {
	ifaces []Interface
	failOn string
	ran    [][]string
}

func (s *scriptAgent) Command(_ context.Context, request []byte) ([]byte, error) {
	var req Request
	if err := json.Unmarshal(request, &req); err != nil {
		return nil, err
	}
	var ret any
	switch req.Execute {
	case CmdNetworkInterfaces:
		ret = s.ifaces
	case CmdExec:
		var a ExecArgs
		_ = json.Unmarshal(req.Arguments, &a)
		s.ran = append(s.ran, append([]string{a.Path}, a.Arg...))
		ret = ExecStarted{PID: int64(len(s.ran))}
	case CmdExecStatus:
		code := 0
		if last := s.ran[len(s.ran)-1]; strings.Join(last, " ") == s.failOn {
			code = 2
		}
		ret = ExecStatus{Exited: true, ExitCode: &code, ErrData: []byte("RTNETLINK answers: nope")}
	default:
		return nil, fmt.Errorf("unexpected %s", req.Execute)
	}
	b, _ := json.Marshal(ret)
	return json.Marshal(Response{Return: b})
}

func TestConfigureNetwork(t *testing.T) {
	ifaces := []Interface{{Name: "lo", HardwareAddress: "00:00:00:00:00:00"}, {Name: "eth0", HardwareAddress: "52:54:00:AA:00:01"}}
	cfg := NetworkConfig{
		Interfaces: []NetInterface{{MAC: "52:54:00:aa:00:01", Addresses: []string{"192.0.2.10/24"}, MTU: 1400}},
		Gateway:    "192.0.2.1",
		Routes:     []Route{{Destination: "198.51.100.0/24", Via: "192.0.2.254"}},
	}
	a := &scriptAgent{ifaces: ifaces}
	if err := NewClient(a).ConfigureNetwork(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"ip", "link", "set", "dev", "lo", "up"},
		{"ip", "link", "set", "dev", "eth0", "mtu", "1400", "up"},
		{"ip", "addr", "replace", "192.0.2.10/24", "dev", "eth0"},
		{"ip", "-4", "route", "replace", "default", "via", "192.0.2.1"},
		{"ip", "route", "replace", "198.51.100.0/24", "via", "192.0.2.254"},
	}
	if fmt.Sprint(a.ran) != fmt.Sprint(want) {
		t.Fatalf("got %q, want %q", a.ran, want)
	}

	fail := &scriptAgent{ifaces: ifaces, failOn: "ip -4 route replace default via 192.0.2.1"}
	err := NewClient(fail).ConfigureNetwork(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "exit code 2") || !strings.Contains(err.Error(), "RTNETLINK") || len(fail.ran) != 4 {
		t.Fatalf("failing step: got %v after %d commands, want exit code 2 with stderr after 4", err, len(fail.ran))
	}

	for name, bad := range map[string]NetworkConfig{
		"unknown mac":  {Interfaces: []NetInterface{{MAC: "52:54:00:aa:00:02"}}},
		"bad mac":      {Interfaces: []NetInterface{{MAC: "zz"}}},
		"bad address":  {Interfaces: []NetInterface{{MAC: "52:54:00:aa:00:01", Addresses: []string{"192.0.2.10"}}}},
		"bad gateway":  {Gateway: "192.0.2"},
		"bad route":    {Routes: []Route{{Destination: "x", Via: "192.0.2.1"}}},
		"bad next hop": {Routes: []Route{{Destination: "198.51.100.0/24", Via: ""}}},
		"bad mtu":      {Interfaces: []NetInterface{{MAC: "52:54:00:aa:00:01", MTU: -1}}},
	} {
		a := &scriptAgent{ifaces: ifaces}
		if err := NewClient(a).ConfigureNetwork(context.Background(), bad); err == nil || len(a.ran) != 0 {
			t.Errorf("%s: got %v after %d commands, want an error before any command", name, err, len(a.ran))
		}
	}
}

func TestParseResponseKeepsID(t *testing.T) {
	r, err := ParseResponse([]byte(`{"return":{},"id":"x1"}`))
	if err != nil || !bytes.Equal(r.ID, []byte(`"x1"`)) {
		t.Fatalf("got %+v, %v; want id \"x1\"", r, err)
	}
}

// TestQemuGaReplies decodes replies in the form qemu-ga itself sends, fields this package does
// not model included (they must not be refused: real images run qemu-ga).
func TestQemuGaReplies(t *testing.T) {
	ifs, err := NewClient(replyTransport(`{"return": [{"name": "lo", "ip-addresses": [{"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8}, {"ip-address-type": "ipv6", "ip-address": "::1", "prefix": 128}], "statistics": {"tx-packets": 0, "rx-bytes": 0}, "hardware-address": "00:00:00:00:00:00"}, {"name": "eth0", "hardware-address": "52:54:00:12:34:56"}]}`)).Interfaces(context.Background())
	if err != nil || len(ifs) != 2 || ifs[0].IPAddresses[1].Address != "::1" || ifs[1].HardwareAddress != "52:54:00:12:34:56" {
		t.Fatalf("interfaces: got %+v, %v", ifs, err)
	}
	st, err := NewClient(replyTransport(`{"return": {"exitcode": 0, "out-data": "aGkK", "exited": true}}`)).Status(context.Background(), 5)
	if err != nil || string(st.OutData) != "hi\n" || *st.ExitCode != 0 {
		t.Fatalf("exec status: got %+v, %v", st, err)
	}
	info, err := NewClient(replyTransport(`{"return": {"version": "7.2.0", "supported_commands": [{"enabled": true, "name": "guest-ping", "success-response": true}]}}`)).Info(context.Background())
	if err != nil || info.Version != "7.2.0" || info.SupportedCommands[0].Name != "guest-ping" {
		t.Fatalf("info: got %+v, %v", info, err)
	}
	err = NewClient(replyTransport(`{"error": {"class": "GenericError", "desc": "Guest agent command failed, error was 'Failed to execute child process'"}}`)).Ping(context.Background())
	var ae *Error
	if !errors.As(err, &ae) || ae.Class != ClassGeneric || !strings.Contains(err.Error(), "guest-ping") {
		t.Fatalf("error reply: got %v", err)
	}
}
