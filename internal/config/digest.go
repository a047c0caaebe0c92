package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"

	ctyjson "github.com/zclconf/go-cty/cty/json"
)

// InputDigest is the SHA-256 of the evaluated non-secret inputs: every root variable's value
// (a sensitive variable contributes only its name), every env_optional read, and the names of
// the secrets referenced with env(). It changes exactly when re-evaluating the same files
// could give a different plan.
func (t *Topology) InputDigest() string {
	type entry struct {
		Kind  string          `json:"k"`
		Name  string          `json:"n"`
		Value json.RawMessage `json:"v,omitempty"`
	}
	var entries []entry
	for _, v := range t.Variables {
		en := entry{Kind: "var", Name: v.Name}
		if v.Sensitive {
			en.Kind = "var(sensitive)"
		} else if v.Value.IsWhollyKnown() {
			b, err := ctyjson.Marshal(v.Value, v.Value.Type())
			if err == nil {
				en.Value = b
			}
		}
		entries = append(entries, en)
	}
	names := make([]string, 0, len(t.EnvRead))
	for n := range t.EnvRead {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		b, _ := json.Marshal(t.EnvRead[n])
		entries = append(entries, entry{Kind: "env_optional", Name: n, Value: b})
	}
	for _, r := range t.SecretRefs {
		entries = append(entries, entry{Kind: "secret", Name: r.String()})
	}
	b, _ := json.Marshal(entries)
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
