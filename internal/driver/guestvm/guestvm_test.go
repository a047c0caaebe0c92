package guestvm

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/guestagent"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestNetworkConfig: every IPv4 address of every attachment goes on the NIC with its MAC, the
// first gateway (or a route to default or an IPv4 /0) is the default route, other routes are
// masked; bad input is driver.ErrInvalid before anything reaches a guest.
func TestNetworkConfig(t *testing.T) {
	atts := []substrate.AttachmentState{
		{Name: "a", MAC: "02:00:00:00:00:0a", IPv4: []string{"198.51.100.10/24", "198.51.100.11/24"}, Gateway: "198.51.100.1"},
		{Name: "b", MAC: "02:00:00:00:00:0b", IPv4: []string{"203.0.113.10/24"}, Gateway: "203.0.113.1"},
		{Name: "c", MAC: "02:00:00:00:00:0c"},
	}
	got, err := NetworkConfig(atts, []substrate.Route{{To: "192.0.2.7/24", Via: "203.0.113.1"}})
	if err != nil {
		t.Fatal(err)
	}
	want := &guestagent.NetworkConfig{
		Interfaces: []guestagent.NetInterface{
			{MAC: "02:00:00:00:00:0a", Addresses: []string{"198.51.100.10/24", "198.51.100.11/24"}},
			{MAC: "02:00:00:00:00:0b", Addresses: []string{"203.0.113.10/24"}},
		},
		Gateway: "198.51.100.1",
		Routes:  []guestagent.Route{{Destination: "192.0.2.0/24", Via: "203.0.113.1"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("NetworkConfig:\n got %+v\nwant %+v", got, want)
	}
	for _, to := range []string{"default", "0.0.0.0/0", "192.0.2.1/0"} {
		got, err := NetworkConfig(atts[:1], []substrate.Route{{To: to, Via: "198.51.100.254"}})
		if err != nil || got.Gateway != "198.51.100.254" || len(got.Routes) != 0 {
			t.Errorf("route to %s: got %+v, %v; want gateway 198.51.100.254 and no other route", to, got, err)
		}
	}
	if got, err := NetworkConfig(atts[2:], nil); got != nil || err != nil {
		t.Errorf("nothing to configure: got %+v, %v; want nil", got, err)
	}
	if got, err := NetworkConfig(nil, []substrate.Route{{To: "192.0.2.0/24", Via: "198.51.100.1"}}); err != nil || got == nil || len(got.Routes) != 1 {
		t.Errorf("a route alone: got %+v, %v; want it configured", got, err)
	}
	for name, tc := range map[string]struct {
		atts   []substrate.AttachmentState
		routes []substrate.Route
	}{
		"IPv6 address":       {atts: []substrate.AttachmentState{{Name: "a", MAC: "02:00:00:00:00:0a", IPv4: []string{"2001:db8::1/64"}}}},
		"no prefix length":   {atts: []substrate.AttachmentState{{Name: "a", MAC: "02:00:00:00:00:0a", IPv4: []string{"198.51.100.10"}}}},
		"bad gateway":        {atts: []substrate.AttachmentState{{Name: "a", MAC: "02:00:00:00:00:0a", IPv4: []string{"198.51.100.10/24"}, Gateway: "nope"}}},
		"bad next hop":       {routes: []substrate.Route{{To: "192.0.2.0/24", Via: "nope"}}},
		"IPv6 next hop":      {routes: []substrate.Route{{To: "192.0.2.0/24", Via: "2001:db8::1"}}},
		"IPv6 route":         {routes: []substrate.Route{{To: "2001:db8::/32", Via: "198.51.100.1"}}},
		"not a prefix route": {routes: []substrate.Route{{To: "nowhere", Via: "198.51.100.1"}}},
	} {
		if got, err := NetworkConfig(tc.atts, tc.routes); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("%s: got %+v, %v; want driver.ErrInvalid", name, got, err)
		}
	}
}

// scripted is a guest agent transport answering guest-exec with pid 7 and guest-exec-status
// with status; it records the requests.
type scripted struct {
	status string
	seen   []string
}

func (s *scripted) Command(_ context.Context, req []byte) ([]byte, error) {
	s.seen = append(s.seen, string(req))
	var r guestagent.Request
	if err := json.Unmarshal(req, &r); err != nil {
		return nil, err
	}
	switch r.Execute {
	case guestagent.CmdExec:
		return []byte(`{"return":{"pid":7}}`), nil
	case guestagent.CmdExecStatus:
		return []byte(`{"return":` + s.status + `}`), nil
	}
	return []byte(`{"error":{"class":"CommandNotFound","desc":"` + r.Execute + `"}}`), nil
}

// TestExec: argv, stdin and the sorted environment reach guest-exec; exit code and both outputs
// come back; a guest killed by a signal and an agent error are exit code -1.
func TestExec(t *testing.T) {
	ctx := context.Background()
	tr := &scripted{status: `{"exited":true,"exitcode":3,"out-data":"b3V0","err-data":"ZXJy"}`}
	res, err := Exec(ctx, guestagent.NewClient(tr), substrate.ExecRequest{Argv: []string{"sh", "-c", "x"}, Stdin: []byte("in"),
		Env: map[string]string{"Z": "1", "A": "2"}})
	if err != nil || res.ExitCode != 3 || string(res.Stdout) != "out" || string(res.Stderr) != "err" {
		t.Fatalf("Exec: %+v, %v; want exit 3, out, err", res, err)
	}
	if len(tr.seen) == 0 || !strings.Contains(tr.seen[0], `"path":"sh","arg":["-c","x"],"env":["A=2","Z=1"],"input-data":"aW4="`) {
		t.Errorf("guest-exec request %q: want argv, sorted env and stdin", tr.seen)
	}
	tr.status = `{"exited":true,"signal":9}`
	if res, err := Exec(ctx, guestagent.NewClient(tr), substrate.ExecRequest{Argv: []string{"sleep"}}); err != nil || res.ExitCode != -1 {
		t.Errorf("killed by a signal: %+v, %v; want exit code -1 and no error", res, err)
	}
	tr.status = `{"exited":true}` // malformed: neither exit code nor signal
	if res, err := Exec(ctx, guestagent.NewClient(tr), substrate.ExecRequest{Argv: []string{"true"}}); err == nil || res.ExitCode != -1 {
		t.Errorf("malformed status: %+v, %v; want an error and exit code -1", res, err)
	}
	if _, err := Exec(ctx, guestagent.NewClient(tr), substrate.ExecRequest{}); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("empty argv: %v, want driver.ErrInvalid", err)
	}
}

// TestWaitReady: it returns once ping answers (after failures), and with the last error once
// the context ends without an answer.
func TestWaitReady(t *testing.T) {
	calls := 0
	err := WaitReady(context.Background(), time.Millisecond, func(context.Context) error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("WaitReady: %v after %d pings; want nil after 3", err, calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	calls = 0
	err = WaitReady(ctx, time.Millisecond, func(context.Context) error {
		calls++
		if calls == 2 {
			cancel()
		}
		return errors.New("refused")
	})
	if err == nil || err.Error() != "refused" || calls != 2 {
		t.Fatalf("WaitReady with the context ended: %v after %d pings; want the last error after 2", err, calls)
	}
	// Each attempt has its own deadline, inside the caller's.
	err = WaitReady(context.Background(), time.Millisecond, func(pctx context.Context) error {
		if _, ok := pctx.Deadline(); !ok {
			return errors.New("attempt without a deadline")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWaitReadyWoken: a wake ends the pause at once (the interval here is an hour, so only the
// wake can bring the second attempt inside the minute), and a nil wake leaves the poll alone.
func TestWaitReadyWoken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wake := make(chan struct{}, 1)
	calls := 0
	err := WaitReadyWoken(ctx, time.Hour, wake, func(context.Context) error {
		calls++
		if calls == 1 {
			wake <- struct{}{} // the agent connects while the first attempt fails
			return errors.New("agent not connected")
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Fatalf("WaitReadyWoken: %v after %d pings; want nil after 2 (woken, not after the hour)", err, calls)
	}
	calls = 0
	err = WaitReadyWoken(ctx, time.Millisecond, nil, func(context.Context) error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("WaitReadyWoken without a wake: %v after %d pings; want nil after 3", err, calls)
	}
}
