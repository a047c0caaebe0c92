package docker

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// socketProxy forwards a unix socket to the real daemon socket and can cut the daemon off
// (connections refused) or make it hang (connections accepted, never answered), without
// touching the shared dockerd.
type socketProxy struct {
	path string
	ln   net.Listener
	mu   sync.Mutex
	mode string // "up", "hang"
	open []net.Conn
}

func newSocketProxy(t *testing.T, target string) *socketProxy {
	p := &socketProxy{path: filepath.Join(t.TempDir(), "docker.sock"), mode: "up"}
	p.listen(t, target)
	t.Cleanup(func() { p.down() })
	return p
}

func (p *socketProxy) listen(t *testing.T, target string) {
	ln, err := net.Listen("unix", p.path)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.open = append(p.open, c)
			mode := p.mode
			p.mu.Unlock()
			if mode == "hang" {
				continue // accepted, never answered
			}
			go func() {
				up, err := net.Dial("unix", target)
				if err != nil {
					c.Close()
					return
				}
				p.mu.Lock()
				p.open = append(p.open, up)
				p.mu.Unlock()
				go func() { _, _ = io.Copy(up, c); up.Close() }()
				_, _ = io.Copy(c, up)
				c.Close()
			}()
		}
	}()
}

// down closes the listener and every connection: the socket refuses from now on.
func (p *socketProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.open {
		c.Close()
	}
	p.open = nil
}

func (p *socketProxy) setMode(m string) {
	p.mu.Lock()
	p.mode = m
	for _, c := range p.open { // drop kept-alive connections so the next call dials anew
		c.Close()
	}
	p.open = nil
	p.mu.Unlock()
}

// TestDaemonUnreachableIsUnknown cuts a real container's daemon off (and makes it hang) and
// checks that the container is observed unknown — never absent — and that delete reports
// ErrUnavailable rather than "already gone"; the container, seen through the real socket, is
// untouched.
func TestDaemonUnreachableIsUnknown(t *testing.T) {
	real := daemonDriver(t)
	ctx := context.Background()
	topo := "test-" + randHex(8)
	cleanupTopology(t, real, topo)
	art := resolveTestImage(t, real, "rootfs", topo)
	owner := testOwner(topo, "web")
	h, _ := mustNode(t, real, owner, art, "sleep", "3600")

	target := "/var/run/docker.sock"
	if host := real.cli.DaemonHost(); len(host) > len("unix://") && host[:7] == "unix://" {
		target = host[7:]
	}
	proxy := newSocketProxy(t, target)
	d, err := New(Options{Host: "unix://" + proxy.path})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if obs, err := d.ObserveNode(ctx, h, owner); err != nil || obs.Status != substrate.Present {
		t.Fatalf("through the proxy: got %s (%s), %v; want present", obs.Status, obs.Reason, err)
	}

	for _, mode := range []string{"hang", "down"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "down" {
				proxy.down()
			} else {
				proxy.setMode("hang")
			}
			cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel()
			obs, err := d.ObserveNode(cctx, h, owner)
			if obs.Status != substrate.Unknown || !errors.Is(err, driver.ErrUnavailable) {
				t.Fatalf("ObserveNode: got %s (%s), %v; want unknown wrapping ErrUnavailable", obs.Status, obs.Reason, err)
			}
			cctx2, cancel2 := context.WithTimeout(ctx, 500*time.Millisecond)
			defer cancel2()
			if err := d.DeleteNode(cctx2, h, owner); !errors.Is(err, driver.ErrUnavailable) {
				t.Fatalf("DeleteNode: got %v, want ErrUnavailable", err)
			}
			if obs, err := real.ObserveNode(ctx, h, owner); err != nil || obs.Status != substrate.Present {
				t.Fatalf("the container itself: got %s, %v; want present (nothing was deleted)", obs.Status, err)
			}
		})
	}
}
