package http

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/states"
)

// Backend is a state document at a URL.
type Backend struct {
	url      string
	location string
	client   *http.Client
}

var (
	_ backend.Backend = (*Backend)(nil)
	_ backend.Writer  = (*Backend)(nil)
	_ backend.Deleter = (*Backend)(nil)
)

// maxState bounds what Read accepts.
const maxState = 1 << 30

// New returns the backend for the state at address (http or https).
func New(address string, client *http.Client) (*Backend, error) {
	u, err := url.Parse(address)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("http backend: address %q: want an http:// or https:// URL", redactURL(address))
	}
	if client == nil {
		client = &http.Client{Timeout: 60 * time.Second}
	}
	return &Backend{url: address, location: u.Redacted(), client: client}, nil
}

// Open builds a backend from settings: "address".
func Open(settings map[string]string) (*Backend, error) {
	for k := range settings {
		if k != "address" {
			return nil, fmt.Errorf("http backend: unknown setting %q (known: address)", k)
		}
	}
	return New(settings["address"], nil)
}

func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(unparseable URL)"
}

// Describe implements backend.Backend: deletion only.
func (b *Backend) Describe() backend.Descriptor {
	return backend.Descriptor{Kind: "http", Location: b.location, Capabilities: backend.Deletion}
}

// Close implements backend.Backend.
func (b *Backend) Close() error { return nil }

func (b *Backend) do(ctx context.Context, method string, body []byte) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.url, r)
	if err != nil {
		return nil, fmt.Errorf("http backend %s: %s: %w", b.location, method, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := b.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the url.Error would repeat the URL with its credentials
		}
		return nil, fmt.Errorf("http backend %s: %s: %w", b.location, method, err)
	}
	return resp, nil
}

// Read implements backend.Reader: 404 means no state.
func (b *Backend) Read(ctx context.Context) (*states.State, error) {
	resp, err := b.do(ctx, http.MethodGet, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotFound:
		return nil, nil
	case http.StatusOK:
	default:
		return nil, fmt.Errorf("http backend %s: GET: %s", b.location, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxState))
	if err != nil {
		return nil, fmt.Errorf("http backend %s: GET: %w", b.location, err)
	}
	st, err := states.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("http backend %s: %w", b.location, err)
	}
	return st, nil
}

// Save implements backend.Writer WITHOUT compare-and-swap: expectSerial cannot be checked and
// is ignored. The Manager only calls this with --allow-unsafe-state.
func (b *Backend) Save(ctx context.Context, st *states.State, expectSerial uint64) error {
	data, err := states.EncodeContext(ctx, st)
	if err != nil {
		return fmt.Errorf("http backend %s: %w", b.location, err)
	}
	resp, err := b.do(ctx, http.MethodPut, data)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("http backend %s: PUT: %s", b.location, resp.Status)
	}
	return nil
}

// Delete implements backend.Deleter (without comparing the serial).
func (b *Backend) Delete(ctx context.Context, expectSerial uint64) error {
	resp, err := b.do(ctx, http.MethodDelete, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return backend.ErrNoState
	case resp.StatusCode/100 != 2:
		return fmt.Errorf("http backend %s: DELETE: %s", b.location, resp.Status)
	}
	return nil
}
