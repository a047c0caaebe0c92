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
		var dst any
		switch key {
		case "format_version":
			dst, seenVersion = &h.FormatVersion, true
		case "tool_version":
			dst = &h.ToolVersion
		case "lineage":
			dst = &h.Lineage
		case "serial":
			dst = &h.Serial
		case "resources", "outputs":
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

func checkHeader(h Header, seenVersion bool) error {
	if !seenVersion || h.FormatVersion < 1 || h.FormatVersion > FormatVersion {
		return &UnsupportedVersionError{Version: h.FormatVersion, ToolVersion: h.ToolVersion}
	}
	if h.Lineage == "" {
		return &CorruptError{Reason: "no lineage"}
	}
	return nil
}
