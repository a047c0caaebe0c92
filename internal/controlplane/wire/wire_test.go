package wire

import (
	"crypto/ed25519"
	"errors"
	"net/http"
	"testing"
	"time"
)

func TestSignVerify(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	otherPub, _, _ := ed25519.GenerateKey(nil)
	now := time.Unix(1_800_000_000, 0)
	m := Message{Domain: DomainRequest, Method: "POST", Path: "/v1/agent/claim", Body: []byte(`{"a":1}`),
		Timestamp: now.Unix(), Nonce: NewNonce(), Agent: "agt_1", Epoch: 3}
	h := http.Header{}
	Sign(h, m, priv)
	check := func(domain, method, path string, body []byte, key ed25519.PublicKey, at time.Time) error {
		got, sig, err := Parse(h, domain, method, path, body)
		if err != nil {
			return err
		}
		return Verify(got, sig, key, at)
	}
	if err := check(DomainRequest, "POST", "/v1/agent/claim", m.Body, pub, now); err != nil {
		t.Fatalf("valid message: %v", err)
	}
	for _, tc := range []struct {
		name   string
		domain string
		method string
		path   string
		body   string
		key    ed25519.PublicKey
		at     time.Time
		want   error
	}{
		{"other body", DomainRequest, "POST", "/v1/agent/claim", `{"a":2}`, pub, now, ErrBadSignature},
		{"other path", DomainRequest, "POST", "/v1/agent/heartbeat", `{"a":1}`, pub, now, ErrBadSignature},
		{"other method", DomainRequest, "PUT", "/v1/agent/claim", `{"a":1}`, pub, now, ErrBadSignature},
		{"answer domain", DomainAnswer, "POST", "/v1/agent/claim", `{"a":1}`, pub, now, ErrBadSignature},
		{"other key", DomainRequest, "POST", "/v1/agent/claim", `{"a":1}`, otherPub, now, ErrBadSignature},
		{"too old", DomainRequest, "POST", "/v1/agent/claim", `{"a":1}`, pub, now.Add(MaxSkew + time.Second), ErrStale},
		{"from the future", DomainRequest, "POST", "/v1/agent/claim", `{"a":1}`, pub, now.Add(-MaxSkew - time.Second), ErrStale},
	} {
		if err := check(tc.domain, tc.method, tc.path, []byte(tc.body), tc.key, tc.at); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	for hdr, v := range map[string]string{HeaderEpoch: "4", HeaderAgent: "agt_2", HeaderTimestamp: "1800000001", HeaderNonce: NewNonce()} {
		saved := h.Get(hdr)
		h.Set(hdr, v)
		if err := check(DomainRequest, "POST", "/v1/agent/claim", m.Body, pub, now); !errors.Is(err, ErrBadSignature) {
			t.Errorf("changed %s: got %v, want %v", hdr, err, ErrBadSignature)
		}
		h.Set(hdr, saved)
	}
	h.Del(HeaderSignature)
	if err := check(DomainRequest, "POST", "/v1/agent/claim", m.Body, pub, now); !errors.Is(err, ErrMalformed) {
		t.Errorf("no signature: got %v, want %v", err, ErrMalformed)
	}
}
