package guestagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Command names of the supported subset.
const (
	CmdSync              = "guest-sync"
	CmdSyncDelimited     = "guest-sync-delimited"
	CmdPing              = "guest-ping"
	CmdInfo              = "guest-info"
	CmdExec              = "guest-exec"
	CmdExecStatus        = "guest-exec-status"
	CmdNetworkInterfaces = "guest-network-get-interfaces"
)

// Sentinel is the byte guest-sync-delimited puts before its reply, and that a client may send to
// make the agent drop any partial input.
const Sentinel = 0xFF

// ErrMalformed marks a reply (or request) that is not a well-formed QGA message.
var ErrMalformed = errors.New("malformed guest agent message")

// Request is one command as sent on the wire: {"execute": ..., "arguments": {...}, "id": ...}.
type Request struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	ID        json.RawMessage `json:"id,omitempty"`
}

// Response is one reply: exactly one of Return or Error is set; ID echoes the request's id.
type Response struct {
	Return json.RawMessage `json:"return,omitempty"`
	Error  *Error          `json:"error,omitempty"`
	ID     json.RawMessage `json:"id,omitempty"`
}

// Error is the agent's error object {"class": ..., "desc": ...}.
type Error struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *Error) Error() string { return "guest agent error " + e.Class + ": " + e.Desc }

// Error classes the server uses (QMP's names).
const (
	ClassGeneric         = "GenericError"
	ClassCommandNotFound = "CommandNotFound"
)

// SyncArgs are the arguments of guest-sync and guest-sync-delimited; the reply returns ID.
type SyncArgs struct {
	ID int64 `json:"id"`
}

// Info is guest-info's reply.
type Info struct {
	Version           string        `json:"version"`
	SupportedCommands []CommandInfo `json:"supported_commands"`
}

// CommandInfo is one entry of Info.SupportedCommands.
type CommandInfo struct {
	Name            string `json:"name"`
	Enabled         bool   `json:"enabled"`
	SuccessResponse bool   `json:"success-response"`
}

// ExecArgs are guest-exec's arguments. InputData and the output fields are base64 on the wire
// (encoding/json does that for []byte). Env, when set, is the whole environment of the process.
type ExecArgs struct {
	Path          string   `json:"path"`
	Arg           []string `json:"arg,omitempty"`
	Env           []string `json:"env,omitempty"`
	InputData     []byte   `json:"input-data,omitempty"`
	CaptureOutput bool     `json:"capture-output,omitempty"`
}

// ExecStarted is guest-exec's reply.
type ExecStarted struct {
	PID int64 `json:"pid"`
}

// ExecStatusArgs are guest-exec-status's arguments.
type ExecStatusArgs struct {
	PID int64 `json:"pid"`
}

// ExecStatus is guest-exec-status's reply. ExitCode and Signal are set only once Exited.
type ExecStatus struct {
	Exited       bool   `json:"exited"`
	ExitCode     *int   `json:"exitcode,omitempty"`
	Signal       *int   `json:"signal,omitempty"`
	OutData      []byte `json:"out-data,omitempty"`
	ErrData      []byte `json:"err-data,omitempty"`
	OutTruncated bool   `json:"out-truncated,omitempty"`
	ErrTruncated bool   `json:"err-truncated,omitempty"`
}

// Interface is one entry of guest-network-get-interfaces's reply.
type Interface struct {
	Name            string      `json:"name"`
	HardwareAddress string      `json:"hardware-address,omitempty"`
	IPAddresses     []IPAddress `json:"ip-addresses,omitempty"`
}

// IPAddress is one address of an Interface; Type is "ipv4" or "ipv6".
type IPAddress struct {
	Type    string `json:"ip-address-type"`
	Address string `json:"ip-address"`
	Prefix  int    `json:"prefix"`
}

// ParseResponse decodes one reply strictly: a single JSON object with exactly one of "return" or
// "error" and no other field but "id"; an error object needs a class.
func ParseResponse(b []byte) (Response, error) {
	var r Response
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Response{}, fmt.Errorf("%w: reply %s: %v", ErrMalformed, quote(b), err)
	}
	if dec.More() {
		return Response{}, fmt.Errorf("%w: reply %s: trailing data after the object", ErrMalformed, quote(b))
	}
	hasReturn := len(r.Return) > 0
	switch {
	case hasReturn && r.Error != nil:
		return Response{}, fmt.Errorf("%w: reply %s: both return and error", ErrMalformed, quote(b))
	case !hasReturn && r.Error == nil:
		return Response{}, fmt.Errorf("%w: reply %s: neither return nor error", ErrMalformed, quote(b))
	case r.Error != nil && r.Error.Class == "":
		return Response{}, fmt.Errorf("%w: reply %s: error without a class", ErrMalformed, quote(b))
	}
	return r, nil
}

// quote shortens a message for an error text.
func quote(b []byte) string {
	const limit = 200
	if len(b) > limit {
		return fmt.Sprintf("%q…", b[:limit])
	}
	return fmt.Sprintf("%q", b)
}
