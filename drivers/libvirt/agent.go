package libvirt

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"zyvor.dev/sysbox/pkg/substrate"
)

// agentTransport carries one QEMU guest agent command and returns its raw reply. libvirt's
// implementation is virDomainQemuAgentCommand (libvirtd owns the agent socket and sends
// guest-sync itself).
type agentTransport interface {
	Command(ctx context.Context, req []byte) ([]byte, error)
}

// domainAgent is the agent of one domain, through libvirtd.
type domainAgent struct {
	c   conn
	dom golibvirt.Domain
}

func (a domainAgent) Command(ctx context.Context, req []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// libvirt takes whole seconds; bound every command by the context's deadline, else 10 s.
	timeout := int32(10)
	if dl, ok := ctx.Deadline(); ok {
		if s := int32(time.Until(dl) / time.Second); s < timeout {
			timeout = max(s, 1)
		}
	}
	res, err := a.c.QEMUDomainAgentCommand(a.dom, string(req), timeout, 0)
	if err != nil {
		return nil, apiErr("guest agent of domain "+a.dom.Name, err)
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("guest agent of domain %s: empty reply", a.dom.Name)
	}
	return []byte(res[0]), nil
}

// agentCall sends {"execute": cmd, "arguments": args} and decodes "return" into out.
func agentCall(ctx context.Context, t agentTransport, cmd string, args, out any) error {
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	raw, err := t.Command(ctx, b)
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	var reply struct {
		Return json.RawMessage `json:"return"`
		Error  *struct {
			Class string `json:"class"`
			Desc  string `json:"desc"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &reply); err != nil {
		return fmt.Errorf("%s: reply %.200q: %w", cmd, raw, err)
	}
	if reply.Error != nil {
		return fmt.Errorf("%s: guest agent error %s: %s", cmd, reply.Error.Class, reply.Error.Desc)
	}
	if out != nil {
		if err := json.Unmarshal(reply.Return, out); err != nil {
			return fmt.Errorf("%s: return %.200q: %w", cmd, reply.Return, err)
		}
	}
	return nil
}

// waitAgent polls guest-ping until it answers or ctx ends; the last error says why not.
func waitAgent(ctx context.Context, t agentTransport) error {
	var last error
	for {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		last = agentCall(pctx, t, "guest-ping", nil, nil)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("guest agent did not answer guest-ping (%v): %w", last, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// maxExecOutput bounds each captured stream of a guest command.
const maxExecOutput = 16 << 20

// agentExec runs req through guest-exec and polls guest-exec-status until the process exits or
// ctx ends. The agent protocol has no kill: a command still running at the deadline is left to
// the guest, and the call returns ctx's error.
func agentExec(ctx context.Context, t agentTransport, req substrate.ExecRequest) (substrate.ExecResult, error) {
	args := map[string]any{"path": req.Argv[0], "arg": req.Argv[1:], "capture-output": true}
	if len(req.Env) > 0 {
		env := make([]string, 0, len(req.Env))
		for k, v := range req.Env {
			env = append(env, k+"="+v)
		}
		sort.Strings(env)
		args["env"] = env
	}
	if req.Stdin != nil {
		args["input-data"] = base64.StdEncoding.EncodeToString(req.Stdin)
	}
	var started struct {
		PID int `json:"pid"`
	}
	if err := agentCall(ctx, t, "guest-exec", args, &started); err != nil {
		return substrate.ExecResult{}, err
	}
	delay := 20 * time.Millisecond
	for {
		var st struct {
			Exited   bool   `json:"exited"`
			ExitCode *int   `json:"exitcode"`
			Signal   *int   `json:"signal"`
			OutData  string `json:"out-data"`
			ErrData  string `json:"err-data"`
		}
		if err := agentCall(ctx, t, "guest-exec-status", map[string]any{"pid": started.PID}, &st); err != nil {
			return substrate.ExecResult{}, err
		}
		if st.Exited {
			res := substrate.ExecResult{ExitCode: -1}
			if st.ExitCode != nil {
				res.ExitCode = *st.ExitCode
			}
			var err error
			if res.Stdout, err = decodeCapped(st.OutData); err != nil {
				return res, fmt.Errorf("guest-exec-status: out-data: %w", err)
			}
			if res.Stderr, err = decodeCapped(st.ErrData); err != nil {
				return res, fmt.Errorf("guest-exec-status: err-data: %w", err)
			}
			return res, nil
		}
		select {
		case <-ctx.Done():
			return substrate.ExecResult{ExitCode: -1}, fmt.Errorf("guest pid %d still running: %w", started.PID, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*2, 500*time.Millisecond)
	}
}

func decodeCapped(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if len(b) > maxExecOutput {
		b = b[:maxExecOutput]
	}
	return b, err
}

// guestInterfaces maps lower-case MAC → interface name from guest-network-get-interfaces.
func guestInterfaces(ctx context.Context, t agentTransport) (map[string]string, error) {
	var ifs []struct {
		Name string `json:"name"`
		MAC  string `json:"hardware-address"`
	}
	if err := agentCall(ctx, t, "guest-network-get-interfaces", nil, &ifs); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, i := range ifs {
		if i.MAC != "" {
			out[strings.ToLower(i.MAC)] = i.Name
		}
	}
	return out, nil
}
