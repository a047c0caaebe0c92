package sysbox

import (
	"bytes"
	"encoding/json"
)

func jsonIndent(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "  ", "  "); err != nil {
		return "", err
	}
	return "  " + out.String(), nil
}
