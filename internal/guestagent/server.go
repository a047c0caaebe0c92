package guestagent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
)

// DefaultMaxOutput bounds the captured stdout and stderr of one guest-exec, each.
const DefaultMaxOutput = 1 << 20

// Server is the agent side of the protocol subset. One Server may serve several connections;
// guest-exec processes are shared between them (a pid started on one may be polled on another).
type Server struct {
	// Version is reported by guest-info.
	Version string
	// MaxOutput bounds captured output per stream (default DefaultMaxOutput); the rest is
	// drained and reported as truncated.
	MaxOutput int

	mu    sync.Mutex
	procs map[int64]*proc
}

type proc struct {
	done     chan struct{}
	state    *os.ProcessState
	out, err *boundedBuffer
}

// Serve answers requests from rw until it reports an error (io.EOF when the peer is gone) or
// ctx ends. Requests are JSON objects, optionally newline-terminated; a 0xFF byte drops any
// partial request, as QEMU's agent does.
func (s *Server) Serve(ctx context.Context, rw io.ReadWriter) error {
	r := bufio.NewReaderSize(rw, 64<<10)
	var sc scanner
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		b, err := r.ReadByte()
		if err != nil {
			return err
		}
		msg, bad := sc.feed(b)
		switch {
		case bad != "":
			if err := writeReply(rw, false, Response{Error: &Error{Class: ClassGeneric, Desc: bad}}); err != nil {
				return err
			}
		case msg != nil:
			delimited, resp := s.handle(ctx, msg)
			if err := writeReply(rw, delimited, resp); err != nil {
				return err
			}
		}
	}
}

func writeReply(w io.Writer, delimited bool, r Response) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode reply: %w", err)
	}
	if delimited {
		b = append([]byte{Sentinel}, b...)
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write reply: %w", err)
	}
	return nil
}

// scanner splits the input into JSON objects by tracking nesting, strings and escapes, so a
// request need not end with a newline. Anything outside an object that is not white space is
// garbage up to the next newline.
type scanner struct {
	buf     []byte
	depth   int
	inStr   bool
	escape  bool
	garbage bool
}

func (sc *scanner) reset() { *sc = scanner{buf: sc.buf[:0]} }

// feed takes one byte and returns a complete message, or a complaint about garbage.
func (sc *scanner) feed(b byte) (msg []byte, bad string) {
	if b == Sentinel {
		sc.reset()
		return nil, ""
	}
	if sc.garbage {
		sc.buf = append(sc.buf, b)
		if b == '\n' || len(sc.buf) > maxMessage {
			bad = fmt.Sprintf("invalid JSON input %s", quote(bytes.TrimSpace(sc.buf)))
			sc.reset()
		}
		return nil, bad
	}
	if sc.depth == 0 {
		switch b {
		case ' ', '\t', '\r', '\n':
			return nil, ""
		case '{':
		default:
			sc.garbage = true
			sc.buf = append(sc.buf[:0], b)
			return nil, ""
		}
	}
	sc.buf = append(sc.buf, b)
	if len(sc.buf) > maxMessage {
		sc.reset()
		return nil, fmt.Sprintf("request over %d bytes", maxMessage)
	}
	switch {
	case sc.inStr && sc.escape:
		sc.escape = false
	case sc.inStr && b == '\\':
		sc.escape = true
	case b == '"':
		sc.inStr = !sc.inStr
	case sc.inStr:
	case b == '{' || b == '[':
		sc.depth++
	case b == '}' || b == ']':
		sc.depth--
		if sc.depth == 0 {
			msg = bytes.Clone(sc.buf)
			sc.reset()
		}
	}
	return msg, ""
}

func genericError(format string, args ...any) Response {
	return Response{Error: &Error{Class: ClassGeneric, Desc: fmt.Sprintf(format, args...)}}
}

// handle runs one request; delimited asks for the 0xFF sentinel before the reply.
func (s *Server) handle(ctx context.Context, msg []byte) (delimited bool, resp Response) {
	var req Request
	dec := json.NewDecoder(bytes.NewReader(msg))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return false, genericError("invalid request %s: %v", quote(msg), err)
	}
	if req.Execute == "" {
		return false, genericError("request %s: no execute", quote(msg))
	}
	ret, err := s.dispatch(ctx, req)
	resp.ID = req.ID
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			e = &Error{Class: ClassGeneric, Desc: err.Error()}
		}
		resp.Error = e
		return false, resp
	}
	b, err := json.Marshal(ret)
	if err != nil {
		resp.Error = &Error{Class: ClassGeneric, Desc: "encode reply: " + err.Error()}
		return false, resp
	}
	resp.Return = b
	return req.Execute == CmdSyncDelimited, resp
}

// decodeArgs decodes a request's arguments strictly; missing arguments decode as zero.
func decodeArgs(req Request, out any) error {
	if len(req.Arguments) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(req.Arguments))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("%s: invalid arguments %s: %v", req.Execute, quote(req.Arguments), err)
	}
	return nil
}

// Commands lists the commands the server answers, in guest-info order.
var Commands = []string{CmdSync, CmdSyncDelimited, CmdPing, CmdInfo, CmdExec, CmdExecStatus, CmdNetworkInterfaces}

func (s *Server) dispatch(_ context.Context, req Request) (any, error) {
	switch req.Execute {
	case CmdSync, CmdSyncDelimited:
		var a struct {
			ID *json.Number `json:"id"`
		}
		if err := decodeArgs(req, &a); err != nil {
			return nil, err
		}
		if a.ID == nil {
			return nil, fmt.Errorf("%s: parameter 'id' is missing", req.Execute)
		}
		return *a.ID, nil
	case CmdPing:
		return struct{}{}, nil
	case CmdInfo:
		info := Info{Version: s.Version}
		for _, c := range Commands {
			info.SupportedCommands = append(info.SupportedCommands, CommandInfo{Name: c, Enabled: true, SuccessResponse: true})
		}
		return info, nil
	case CmdExec:
		var a ExecArgs
		if err := decodeArgs(req, &a); err != nil {
			return nil, err
		}
		return s.exec(a)
	case CmdExecStatus:
		var a struct {
			PID *int64 `json:"pid"`
		}
		if err := decodeArgs(req, &a); err != nil {
			return nil, err
		}
		if a.PID == nil {
			return nil, fmt.Errorf("%s: parameter 'pid' is missing", req.Execute)
		}
		return s.status(*a.PID)
	case CmdNetworkInterfaces:
		return localInterfaces()
	}
	return nil, &Error{Class: ClassCommandNotFound, Desc: fmt.Sprintf("The command %s has not been found", req.Execute)}
}

// exec starts argv (never through a shell) and returns its pid at once.
func (s *Server) exec(a ExecArgs) (ExecStarted, error) {
	if a.Path == "" {
		return ExecStarted{}, fmt.Errorf("%s: parameter 'path' is missing", CmdExec)
	}
	cmd := exec.Command(a.Path, a.Arg...)
	if len(a.Env) > 0 {
		cmd.Env = a.Env
	}
	if len(a.InputData) > 0 {
		cmd.Stdin = bytes.NewReader(a.InputData)
	}
	limit := s.MaxOutput
	if limit <= 0 {
		limit = DefaultMaxOutput
	}
	p := &proc{done: make(chan struct{})}
	if a.CaptureOutput {
		p.out, p.err = &boundedBuffer{limit: limit}, &boundedBuffer{limit: limit}
		cmd.Stdout, cmd.Stderr = p.out, p.err
	}
	if err := cmd.Start(); err != nil {
		return ExecStarted{}, fmt.Errorf("%s %s: %v", CmdExec, a.Path, err)
	}
	pid := int64(cmd.Process.Pid)
	s.mu.Lock()
	if s.procs == nil {
		s.procs = map[int64]*proc{}
	}
	s.procs[pid] = p
	s.mu.Unlock()
	go func() {
		_ = cmd.Wait() // the exit is reported through ProcessState
		p.state = cmd.ProcessState
		close(p.done)
	}()
	return ExecStarted{PID: pid}, nil
}

// status reports a process; once it has been reported as exited, its pid is forgotten.
func (s *Server) status(pid int64) (ExecStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.procs[pid]
	if !ok {
		return ExecStatus{}, fmt.Errorf("%s: invalid parameter 'pid': no guest-exec process %d", CmdExecStatus, pid)
	}
	select {
	case <-p.done:
	default:
		return ExecStatus{}, nil
	}
	delete(s.procs, pid)
	st := ExecStatus{Exited: true}
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		sig := int(ws.Signal())
		st.Signal = &sig
	} else {
		code := p.state.ExitCode()
		st.ExitCode = &code
	}
	if p.out != nil {
		st.OutData, st.OutTruncated = p.out.buf.Bytes(), p.out.truncated
		st.ErrData, st.ErrTruncated = p.err.buf.Bytes(), p.err.truncated
	}
	return st, nil
}

// boundedBuffer keeps the first limit bytes and drains the rest, so a chatty process never
// blocks on a full pipe.
type boundedBuffer struct {
	limit     int
	buf       bytes.Buffer
	truncated bool
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if room := b.limit - b.buf.Len(); room < len(p) {
		b.truncated = true
		b.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.buf.Write(p)
}

// localInterfaces lists this machine's interfaces in guest-network-get-interfaces form.
func localInterfaces() ([]Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("%s: %v", CmdNetworkInterfaces, err)
	}
	out := make([]Interface, 0, len(ifs))
	for _, i := range ifs {
		e := Interface{Name: i.Name, HardwareAddress: i.HardwareAddr.String()}
		if e.HardwareAddress == "" {
			e.HardwareAddress = "00:00:00:00:00:00"
		}
		addrs, err := i.Addrs()
		if err != nil {
			return nil, fmt.Errorf("%s: interface %s: %v", CmdNetworkInterfaces, i.Name, err)
		}
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ones, _ := n.Mask.Size()
			t := "ipv6"
			if n.IP.To4() != nil {
				t = "ipv4"
			}
			e.IPAddresses = append(e.IPAddresses, IPAddress{Type: t, Address: n.IP.String(), Prefix: ones})
		}
		out = append(out, e)
	}
	return out, nil
}
