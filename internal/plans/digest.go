package plans

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"strconv"

	"zyvor.dev/sysbox/internal/addrs"
)

// ActionsDigest is the SHA-256 of the ordered actions' JSON (encoding/json's encoding of the
// slice).
//
// The JSON is written field by field straight into the hash, the way encoding/json lays out
// ResourceAction (field order, omitempty, HTML-safe string escaping), with strings and addresses
// that need no escaping copied as they are and every other value (raw attributes, changes,
// capabilities, strings needing escapes) encoded by encoding/json itself. If any of those
// fails, the digest is that of json.Marshal's result, as before. TestActionsDigestMatchesJSON
// holds the two equal.
func ActionsDigest(actions []ResourceAction) string {
	h := sha256.New()
	if !writeActions(h, actions) {
		h.Reset()
		b, _ := json.Marshal(actions)
		h.Write(b)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// writeActions writes json.Marshal(actions) to h; false if a value could not be encoded.
func writeActions(h io.Writer, actions []ResourceAction) bool {
	if actions == nil {
		h.Write([]byte("null"))
		return true
	}
	b := make([]byte, 0, 64<<10)
	b = append(b, '[')
	deps := map[depList][]byte{}
	for i := range actions {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = appendAction(b, &actions[i], deps); !ok {
			return false
		}
		if len(b) > 32<<10 {
			h.Write(b)
			b = b[:0]
		}
	}
	b = append(b, ']')
	h.Write(b)
	return true
}

// depList identifies a dependency list by its backing array and length: instances of one
// resource share their list (config), and its JSON is built once per digest.
type depList struct {
	first *addrs.Instance
	n     int
}

func appendAction(b []byte, a *ResourceAction, deps map[depList][]byte) ([]byte, bool) {
	var ok bool
	b = append(b, `{"address":`...)
	b = appendJSONString(b, a.Address.String())
	b = append(b, `,"action":`...)
	b = appendJSONString(b, string(a.Action))
	b = append(b, `,"reason":`...)
	b = appendJSONString(b, a.Reason)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, a.Type)
	b = append(b, `,"mode":`...)
	b = appendJSONString(b, a.Mode)
	b = append(b, `,"schema_version":`...)
	b = strconv.AppendInt(b, int64(a.SchemaVersion), 10)
	if len(a.Before) > 0 {
		b = append(b, `,"before":`...)
		if b, ok = appendRaw(b, a.Before); !ok {
			return nil, false
		}
	}
	if len(a.After) > 0 {
		b = append(b, `,"after":`...)
		if b, ok = appendRaw(b, a.After); !ok {
			return nil, false
		}
	}
	if len(a.Changes) > 0 {
		b = append(b, `,"changes":`...)
		if b, ok = appendMarshal(b, a.Changes); !ok {
			return nil, false
		}
	}
	if len(a.DependsOn) > 0 {
		k := depList{&a.DependsOn[0], len(a.DependsOn)}
		enc, ok := deps[k]
		if !ok {
			enc = append(enc, `,"depends_on":[`...)
			for i, d := range a.DependsOn {
				if i > 0 {
					enc = append(enc, ',')
				}
				enc = appendJSONString(enc, d.String())
			}
			enc = append(enc, ']')
			deps[k] = enc
		}
		b = append(b, enc...)
	}
	if a.Driver != "" {
		b = append(b, `,"driver":`...)
		b = appendJSONString(b, a.Driver)
	}
	if len(a.Requires) > 0 {
		b = append(b, `,"requires":`...)
		if b, ok = appendMarshal(b, a.Requires); !ok {
			return nil, false
		}
	}
	return append(b, '}'), true
}

// appendRaw appends raw JSON as encoding/json encodes a json.RawMessage (compacted, HTML
// characters and U+2028/U+2029 escaped): through json.Compact when there is nothing to escape
// (the same bytes and the same errors), through encoding/json otherwise.
func appendRaw(b []byte, raw json.RawMessage) ([]byte, bool) {
	if bytes.ContainsAny(raw, "<>&") || bytes.IndexByte(raw, 0xE2) >= 0 {
		return appendMarshal(b, raw)
	}
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, raw); err != nil {
		return nil, false
	}
	return buf.Bytes(), true
}

func appendMarshal(b []byte, v any) ([]byte, bool) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, false
	}
	return append(b, j...), true
}

// appendJSONString appends s as encoding/json encodes a string: as it is, quoted, when it is
// printable ASCII without '"', '\\', '<', '>' or '&'; otherwise through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			j, _ := json.Marshal(s) // a string always encodes
			return append(b, j...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
