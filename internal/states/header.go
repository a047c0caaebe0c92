package states

import (
	"encoding/json"
	"fmt"
	"io"
)

// Header is the identity of a stored state document: enough for a backend's compare-and-swap.
type Header struct {
	FormatVersion int    `json:"format_version"`
	ToolVersion   string `json:"tool_version"`
	Lineage       string `json:"lineage"`
	Serial        uint64 `json:"serial"`
}

// ReadHeader reads a state document's header fields from r without decoding its resources
// (Encode writes them first, so this reads a few hundred bytes). It checks the format version
// but not the checksum: use it only to compare serials, never to trust content.
func ReadHeader(r io.Reader) (Header, error) {
	var h Header
	dec := json.NewDecoder(r)
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return h, &CorruptError{Reason: fmt.Sprintf("not a JSON object (%v)", err)}
	}
	seenVersion := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return h, &CorruptError{Reason: err.Error()}
		}
		key, _ := tok.(string)
		dst, isHeader := h.field(key)
		switch {
		case isHeader:
			seenVersion = seenVersion || key == "format_version"
		case key == "resources", key == "outputs":
			// The header is complete once the body starts (Encode's order).
			return h, checkHeader(h, seenVersion)
		default:
			dst = new(json.RawMessage)
		}
		if err := dec.Decode(dst); err != nil {
			return h, &CorruptError{Reason: fmt.Sprintf("%s: %v", key, err)}
		}
	}
	return h, checkHeader(h, seenVersion)
}

// field returns where the value of a state document's top-level key goes when the key is one
// of the header's. It is the one list of the header's keys: ReadHeader and Decode's document
// reader both use it.
func (h *Header) field(key string) (dst any, ok bool) {
	switch key {
	case "format_version":
		return &h.FormatVersion, true
	case "tool_version":
		return &h.ToolVersion, true
	case "lineage":
		return &h.Lineage, true
	case "serial":
		return &h.Serial, true
	}
	return nil, false
}

func checkHeader(h Header, seenVersion bool) error {
	if !seenVersion || h.FormatVersion < 1 || h.FormatVersion > FormatVersion {
		return &UnsupportedVersionError{Version: h.FormatVersion, ToolVersion: h.ToolVersion}
	}
	if h.Lineage == "" {
		return &CorruptError{Reason: "no lineage"}
	}
	return nil
}
