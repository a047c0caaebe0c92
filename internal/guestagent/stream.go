package guestagent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxMessage bounds one message on a stream: guest-exec-status may carry up to a few MiB of
// base64 output, and anything larger is a broken peer.
const maxMessage = 64 << 20

// Stream is a Transport over a byte stream to the agent itself (a unix socket, a virtio-serial
// chardev socket, or a Firecracker vsock connection): newline-delimited JSON, one command at a
// time. Before its first command and after any error it resynchronises with
// guest-sync-delimited, skipping whatever stale or partial data is in the pipe.
type Stream struct {
	mu     sync.Mutex
	conn   net.Conn
	r      *bufio.Reader
	synced bool
}

var _ Transport = (*Stream)(nil)

// NewStream returns a transport over conn; it owns conn from now on.
func NewStream(conn net.Conn) *Stream {
	return &Stream{conn: conn, r: bufio.NewReaderSize(conn, 64<<10)}
}

// DialUnix connects to an agent listening on (or a chardev socket at) path.
func DialUnix(ctx context.Context, path string) (*Stream, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("guest agent socket %s: %w", path, err)
	}
	return NewStream(c), nil
}

// Close closes the connection.
func (s *Stream) Close() error { return s.conn.Close() }

// Command sends one request line and returns the reply line.
func (s *Stream) Command(ctx context.Context, request []byte) ([]byte, error) {
	if bytes.ContainsAny(request, "\n\r") || bytes.IndexByte(request, Sentinel) >= 0 {
		return nil, fmt.Errorf("%w: request holds a line break or the 0xFF sentinel", ErrMalformed)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	release := bindDeadline(ctx, s.conn)
	defer release()
	reply, err := s.command(request)
	if err != nil {
		s.synced = false
		return nil, ctxErr(ctx, err)
	}
	return reply, nil
}

// ctxErr names the context as the cause when it ended or its deadline (which the connection's
// deadline may hit a moment before the context notices) has passed.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	return err
}

func (s *Stream) command(request []byte) ([]byte, error) {
	if !s.synced {
		if err := s.sync(); err != nil {
			return nil, err
		}
		s.synced = true
	}
	if _, err := s.conn.Write(append(request[:len(request):len(request)], '\n')); err != nil {
		return nil, fmt.Errorf("write request: %w", err)
	}
	return s.readLine()
}

// sync sends 0xFF (the agent drops partial input) and guest-sync-delimited with a fresh id, then
// reads until a sentinel followed by the reply carrying that id; stale replies are skipped.
func (s *Stream) sync() error {
	id := rand.Int64N(1<<53-1) + 1
	req := fmt.Sprintf(`{"execute":%q,"arguments":{"id":%d}}`, CmdSyncDelimited, id)
	if _, err := s.conn.Write(append([]byte{Sentinel}, req+"\n"...)); err != nil {
		return fmt.Errorf("guest-sync-delimited: write: %w", err)
	}
	skipped := 0
	for {
		// Everything before the sentinel is stale or garbage.
		b, err := s.r.ReadBytes(Sentinel)
		skipped += len(b)
		if err != nil {
			return fmt.Errorf("guest-sync-delimited: waiting for the 0xFF sentinel: %w", err)
		}
		if skipped > maxMessage {
			return fmt.Errorf("guest-sync-delimited: %w: over %d bytes before the sentinel", ErrMalformed, maxMessage)
		}
		line, err := s.readLine()
		if err != nil {
			return fmt.Errorf("guest-sync-delimited: %w", err)
		}
		// A later sentinel inside the line starts a newer reply (the earlier one was cut off).
		if i := bytes.LastIndexByte(line, Sentinel); i >= 0 {
			line = line[i+1:]
		}
		r, err := ParseResponse(line)
		if err != nil || r.Error != nil {
			continue // a stale or mangled reply; ours follows its own sentinel
		}
		var got int64
		if json.Unmarshal(r.Return, &got) == nil && got == id {
			return nil
		}
	}
}

// readLine reads one non-empty reply line (without the line break), bounded by maxMessage.
func (s *Stream) readLine() ([]byte, error) {
	for {
		var line []byte
		for {
			chunk, err := s.r.ReadSlice('\n')
			line = append(line, chunk...)
			if len(line) > maxMessage {
				return nil, fmt.Errorf("%w: reply over %d bytes", ErrMalformed, maxMessage)
			}
			if err == nil {
				break
			}
			if !errors.Is(err, bufio.ErrBufferFull) {
				return nil, fmt.Errorf("read reply: %w", err)
			}
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(bytes.TrimSpace(line)) > 0 {
			return line, nil
		}
	}
}

// bindDeadline makes conn's I/O end at ctx's deadline or cancellation; release undoes it and
// waits for a concurrent cancellation to finish, so no stale deadline hits a later command.
func bindDeadline(ctx context.Context, conn net.Conn) (release func()) {
	d, _ := ctx.Deadline()
	_ = conn.SetDeadline(d)
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = conn.SetDeadline(time.Unix(1, 0))
		close(fired)
	})
	return func() {
		if !stop() {
			<-fired
		}
		_ = conn.SetDeadline(time.Time{})
	}
}

// DialFirecrackerVsock connects to a guest's vsock port through Firecracker's host-side unix
// socket: it sends "CONNECT <port>\n" and expects "OK <host port>\n" before the stream is the
// guest's.
func DialFirecrackerVsock(ctx context.Context, udsPath string, port uint32) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", udsPath)
	if err != nil {
		return nil, fmt.Errorf("firecracker vsock %s: %w", udsPath, err)
	}
	release := bindDeadline(ctx, c)
	err = vsockHandshake(c, port)
	release()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("firecracker vsock %s port %d: %w", udsPath, port, ctxErr(ctx, err))
	}
	return c, nil
}

func vsockHandshake(c net.Conn, port uint32) error {
	if _, err := fmt.Fprintf(c, "CONNECT %d\n", port); err != nil {
		return fmt.Errorf("write CONNECT: %w", err)
	}
	// Byte by byte: what follows the line already belongs to the guest's stream.
	var line []byte
	one := make([]byte, 1)
	for len(line) < 64 {
		if _, err := c.Read(one); err != nil {
			return fmt.Errorf("read handshake reply %q: %w", line, err)
		}
		if one[0] == '\n' {
			f := strings.Fields(string(line))
			if len(f) != 2 || f[0] != "OK" {
				return fmt.Errorf("handshake refused: %q", line)
			}
			if _, err := strconv.ParseUint(f[1], 10, 32); err != nil {
				return fmt.Errorf("handshake reply %q: bad port: %v", line, err)
			}
			return nil
		}
		line = append(line, one[0])
	}
	return fmt.Errorf("handshake reply too long: %q", line)
}
