package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/pkg/stdcopy"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// privateVersion is the version of nodePrivate inside a node handle's envelope.
const privateVersion = 1

// nodePrivate is the provider-private part of a node handle (S7).
type nodePrivate struct {
	ContainerID string `json:"container_id"`
	Name        string `json:"name"`
	ImageID     string `json:"image_id"`
	Marker      string `json:"marker"` // the owner the container was created for
}

func nodeHandle(p nodePrivate) substrate.Handle {
	return substrate.Handle{Driver: Name, ExternalID: p.ContainerID, Private: substrate.Seal(Name, privateVersion, p)}
}

func decodeNodePrivate(env substrate.Envelope) (nodePrivate, error) {
	var p nodePrivate
	return p, env.Open(Name, privateVersion, &p)
}

// CheckPrivate refuses envelopes of unknown versions and envelopes lacking the container id or
// ownership marker that destructive calls compare against.
func (d *Driver) CheckPrivate(env substrate.Envelope) error {
	p, err := decodeNodePrivate(env)
	if err != nil {
		return fmt.Errorf("docker node envelope: %w", err)
	}
	if p.ContainerID == "" {
		return fmt.Errorf("docker node envelope: no container id; run `sysbox import` to re-adopt the container: %w", driver.ErrNotOwned)
	}
	if _, err := substrate.ParseMarker(p.Marker); err != nil {
		return fmt.Errorf("docker node envelope for container %s: no ownership marker (%v); run `sysbox import` to re-adopt it: %w",
			short(p.ContainerID), err, driver.ErrNotOwned)
	}
	return nil
}

func short(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// envList turns resolved environment into the daemon's K=V form, sorted for determinism.
func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// CreateNode creates (does not start) spec's container with network mode none and the owner's
// labels. If a container of that name exists and its labels prove it is spec's (a retried
// create), it is adopted; any other holder of the name is left untouched (ErrNotOwned).
func (d *Driver) CreateNode(ctx context.Context, spec substrate.NodeSpec) (substrate.Handle, error) {
	what := "node " + spec.Owner.Address
	if !spec.Owner.Complete() {
		return substrate.Handle{}, fmt.Errorf("%s: owner is incomplete: %w", what, driver.ErrNotOwned)
	}
	if spec.Artifact == nil || spec.Artifact.Ref == "" {
		return substrate.Handle{}, fmt.Errorf("%s: no resolved image (artifact ref) to run", what)
	}
	name := containerName(spec.Owner)
	init := true
	// NetworkDisabled: the container gets a network namespace of its own with only lo, as
	// with network mode none, but without Docker's network sandbox for it — no endpoint in the
	// "none" network, no namespace mount, no prestart hook re-executing dockerd at each start —
	// which is most of what a start costs the daemon. Docker then writes no hosts file of its
	// own: SetHosts writes the container's /etc/hosts.
	cfg := &container.Config{
		Image:           spec.Artifact.Ref,
		Cmd:             spec.Command,
		Hostname:        spec.Hostname,
		Env:             envList(spec.Environment),
		Labels:          ownerLabels(spec.Owner),
		NetworkDisabled: true,
	}
	hc := &container.HostConfig{
		NetworkMode: "none",
		Init:        &init,
	}
	if spec.CPUs > 0 {
		hc.NanoCPUs = int64(spec.CPUs) * 1e9
	}
	if spec.MemoryMB > 0 {
		hc.Memory = int64(spec.MemoryMB) << 20
	}
	// A name conflict whose holder cannot be inspected yet is a create still in flight in the
	// daemon (typically from a process killed mid-request, now being recovered): wait for it to
	// land or vanish, then adopt it or create again.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := d.cli.ContainerCreate(ctx, cfg, hc, nil, nil, name)
		if err == nil {
			d.owners.remember(resp.ID, cfg.Labels)
			d.owners.setFresh(resp.ID, true)
			return nodeHandle(nodePrivate{ContainerID: resp.ID, Name: name, ImageID: spec.Artifact.Ref, Marker: spec.Owner.Marker()}), nil
		}
		if !errdefs.IsConflict(err) {
			return substrate.Handle{}, apiErr(what+": create container "+name, err)
		}
		ins, ierr := d.cli.ContainerInspect(ctx, name)
		if errdefs.IsNotFound(ierr) && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return substrate.Handle{}, fmt.Errorf("%s: create container %s: %w", what, name, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if ierr != nil {
			return substrate.Handle{}, apiErr(what+": create container "+name+": name in use; inspect", ierr)
		}
		// The name is taken: adopt it only if its labels prove it is this very node's.
		if err := checkOwned(fmt.Sprintf("%s: container %s (%s) already holds the name", what, name, short(ins.ID)), ins.Config.Labels, spec.Owner); err != nil {
			return substrate.Handle{}, err
		}
		if ins.Image != spec.Artifact.Ref {
			return substrate.Handle{}, fmt.Errorf("%s: container %s already exists with image %s, want %s; delete it first", what, name, ins.Image, spec.Artifact.Ref)
		}
		return nodeHandle(nodePrivate{ContainerID: ins.ID, Name: name, ImageID: ins.Image, Marker: spec.Owner.Marker()}), nil
	}
}

// inspectOwned inspects h's container and checks its labels against owner.
func (d *Driver) inspectOwned(ctx context.Context, what string, h substrate.Handle, owner substrate.Owner) (container.InspectResponse, error) {
	if h.ExternalID == "" {
		return container.InspectResponse{}, fmt.Errorf("%s: handle has no container id", what)
	}
	ins, err := d.cli.ContainerInspect(ctx, h.ExternalID)
	if err != nil {
		return ins, d.containerErr(fmt.Sprintf("%s: container %s", what, short(h.ExternalID)), h.ExternalID, err)
	}
	d.owners.remember(ins.ID, ins.Config.Labels)
	if err := checkOwned(fmt.Sprintf("%s: container %s", what, short(ins.ID)), ins.Config.Labels, owner); err != nil {
		return ins, err
	}
	return ins, nil
}

// StartNode starts the container (a no-op when it already runs) and waits until it has a pid.
func (d *Driver) StartNode(ctx context.Context, h substrate.Handle, spec substrate.NodeSpec) error {
	_, err := d.ensureRunning(ctx, "node "+spec.Owner.Address+": start", h, spec.Owner)
	return err
}

// ensureRunning returns h's container running, after checking it is owner's: as last seen when
// its pid is still one of its processes (live.go), else started if need be and inspected.
func (d *Driver) ensureRunning(ctx context.Context, what string, h substrate.Handle, owner substrate.Owner) (running, error) {
	if r, ok := d.live.lookup(h.ExternalID); ok {
		if _, err := d.ownedID(ctx, what, h, owner); err != nil {
			return running{}, err
		}
		return r, nil
	}
	if d.owners.isFresh(h.ExternalID) {
		// Created by this driver and not started since: its labels are known, so it is started
		// without an inspect first (a container started meanwhile makes the start a no-op).
		id, err := d.ownedID(ctx, what, h, owner)
		if err != nil {
			return running{}, err
		}
		d.owners.setFresh(id, false)
		return d.startAndInspect(ctx, what, id)
	}
	ins, err := d.inspectOwned(ctx, what, h, owner)
	if err != nil {
		return running{}, err
	}
	if r, ok := d.live.note(ins); ok {
		return r, nil
	}
	return d.startAndInspect(ctx, what, ins.ID)
}

// startAndInspect starts container id and inspects it: it must be running with a pid.
func (d *Driver) startAndInspect(ctx context.Context, what, id string) (running, error) {
	if err := d.cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
		return running{}, d.containerErr(fmt.Sprintf("%s: container %s", what, short(id)), id, err)
	}
	ins, err := d.cli.ContainerInspect(ctx, id)
	if err != nil {
		return running{}, d.containerErr(fmt.Sprintf("%s: container %s", what, short(id)), id, err)
	}
	r, ok := d.live.note(ins)
	if !ok {
		status := "unknown"
		if ins.State != nil {
			status = fmt.Sprintf("%s (exit code %d, %s)", ins.State.Status, ins.State.ExitCode, ins.State.Error)
		}
		return running{}, fmt.Errorf("%s: container %s did not keep running: %s", what, short(id), status)
	}
	return r, nil
}

// ObserveNode reports present, absent (no such container and no replacement), drifted (the
// container was replaced behind our back, its labels or image changed), degraded (not running,
// or a NIC has lost its host side) or unknown with an error wrapping ErrUnavailable.
func (d *Driver) ObserveNode(ctx context.Context, h substrate.Handle, owner substrate.Owner) (substrate.Observation, error) {
	what := "observe node " + owner.Address
	ins, err := d.cli.ContainerInspect(ctx, h.ExternalID)
	if err != nil {
		return d.observeMissingNode(ctx, h, owner, d.containerErr(fmt.Sprintf("%s: container %s", what, short(h.ExternalID)), h.ExternalID, err))
	}
	obs := substrate.Observation{ExternalID: ins.ID, At: observedAt(), Attributes: map[string]string{
		"name": strings.TrimPrefix(ins.Name, "/"), "image": ins.Image,
	}}
	if o, ok := ownerFromLabels(ins.Config.Labels); ok {
		obs.Owner = &o
	}
	if ins.State != nil {
		obs.Attributes["state"] = ins.State.Status
		if ins.State.Pid > 0 {
			obs.Attributes["pid"] = fmt.Sprint(ins.State.Pid)
		}
	}
	if err := checkOwned("container "+short(ins.ID), ins.Config.Labels, owner); err != nil {
		obs.Status, obs.Reason = substrate.Drifted, err.Error()
		return obs, nil
	}
	if p, perr := decodeNodePrivate(h.Private); perr == nil && p.ImageID != "" && p.ImageID != ins.Image {
		obs.Status, obs.Reason = substrate.Drifted, fmt.Sprintf("container runs image %s, state records %s", ins.Image, p.ImageID)
		return obs, nil
	}
	if ins.HostConfig != nil && ins.HostConfig.NetworkMode != "none" {
		obs.Status, obs.Reason = substrate.Drifted, fmt.Sprintf("network mode is %q, want \"none\"", ins.HostConfig.NetworkMode)
		return obs, nil
	}
	if ins.State == nil || !ins.State.Running || ins.State.Pid <= 0 {
		obs.Status, obs.Reason = substrate.Degraded, "container is not running"
		return obs, nil
	}
	if ins.State.Paused || ins.State.Restarting {
		obs.Status, obs.Reason = substrate.Degraded, "container is "+ins.State.Status
		return obs, nil
	}
	if err := d.observeNICs(ins.ID, ins.State.Pid, owner, &obs); err != nil {
		return obs, fmt.Errorf("%s: %w", what, err)
	}
	return obs, nil
}

// observeMissingNode reports a node whose container inspect failed with err: unknown unless
// the container is not found, then drifted when another container carries this resource's
// labels (replaced behind our back), else absent.
func (d *Driver) observeMissingNode(ctx context.Context, h substrate.Handle, owner substrate.Owner, err error) (substrate.Observation, error) {
	if !errors.Is(err, driver.ErrNotFound) {
		return unknown(h.ExternalID, err), err
	}
	others, lerr := d.listOwned(ctx, owner.Topology, owner.Address)
	if lerr != nil {
		return unknown(h.ExternalID, lerr), lerr
	}
	for _, c := range others {
		if o, ok := ownerFromLabels(c.Labels); ok && o.SameResource(owner) {
			return substrate.Observation{Status: substrate.Drifted, ExternalID: c.ID, Owner: &o, At: observedAt(),
				Reason: fmt.Sprintf("container %s is gone; container %s carries this resource's labels (replaced behind our back)", short(h.ExternalID), short(c.ID))}, nil
		}
	}
	return substrate.Observation{Status: substrate.Absent, ExternalID: h.ExternalID, At: observedAt(),
		Reason: fmt.Sprintf("container %s does not exist", short(h.ExternalID))}, nil
}

// observeNICs sets obs's status from the NICs of the running container id (process pid):
// degraded when an attachment is missing from its namespace or a NIC lost its host side,
// unknown (with the error returned) when they cannot be read, else present.
func (d *Driver) observeNICs(id string, pid int, owner substrate.Owner, obs *substrate.Observation) error {
	nics, err := listMarkedLinks(pid)
	if err != nil {
		obs.Status, obs.Reason = substrate.Unknown, err.Error()
		return err
	}
	obs.Attributes["nics"] = fmt.Sprint(len(nics))
	present := map[string]bool{}
	for _, n := range nics {
		if n.Owner.Equal(owner) {
			present[n.Name] = true
		}
	}
	missing, err := d.missingNICs(id, owner, present)
	if err != nil {
		obs.Status, obs.Reason = substrate.Unknown, err.Error()
		return err
	}
	if len(missing) > 0 {
		obs.Status, obs.Reason = substrate.Degraded, fmt.Sprintf("running but attachment(s) %s missing from its namespace", strings.Join(missing, ", "))
		return nil
	}
	for _, n := range nics {
		if reason := n.hostSideProblem(); reason != "" {
			obs.Status, obs.Reason = substrate.Degraded, fmt.Sprintf("NIC %s (attachment %s): %s", n.Name, n.Attachment, reason)
			return nil
		}
	}
	obs.Status = substrate.Present
	return nil
}

// listOwned lists containers (running or not) labelled with topology and, if not empty, address.
func (d *Driver) listOwned(ctx context.Context, topology, address string) ([]container.Summary, error) {
	f := filters.NewArgs(filters.Arg("label", labelTopology+"="+topology))
	if address != "" {
		f.Add("label", labelAddress+"="+address)
	}
	list, err := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, apiErr("list containers of topology "+topology, err)
	}
	return list, nil
}

// StopNode stops the container gracefully (StopTimeout, then SIGKILL).
func (d *Driver) StopNode(ctx context.Context, h substrate.Handle, owner substrate.Owner) error {
	what := "node " + owner.Address + ": stop"
	id, err := d.ownedID(ctx, what, h, owner)
	if err != nil {
		return err
	}
	secs := int(d.stopTimeout.Seconds())
	d.live.forget(id)
	if err := d.cli.ContainerStop(ctx, id, container.StopOptions{Timeout: &secs}); err != nil {
		return d.containerErr(fmt.Sprintf("%s: container %s", what, short(id)), id, err)
	}
	return nil
}

// DeleteNode removes the container and its NICs after checking its labels; a running container
// is removed with force (the daemon kills it: see DeleteStopsNode), and a container that is
// already gone is not an error.
func (d *Driver) DeleteNode(ctx context.Context, h substrate.Handle, owner substrate.Owner) error {
	what := "node " + owner.Address + ": delete"
	id, err := d.ownedID(ctx, what, h, owner)
	if errors.Is(err, driver.ErrNotFound) {
		if err := d.removeRecordedLinks(h.ExternalID, owner); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	// The container first: a daemon that cannot remove it leaves its NICs wired. Its namespace
	// going takes the veth pairs with it, but asynchronously, so the host sides of NICs not
	// detached before (wired, but their attachment never reached state) are removed here.
	err = d.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !errdefs.IsNotFound(err) {
		return apiErr(fmt.Sprintf("%s: container %s", what, short(id)), err)
	}
	d.owners.forget(id)
	d.live.forget(id)
	if err := d.removeRecordedLinks(id, owner); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// removeRecordedLinks removes the host sides of the NICs containerID's record names for owner
// (Attach records a NIC before wiring it; Detach drops it once its pair is gone), then the
// record. A recorded link that is missing is gone already (the kernel takes a pair with its
// namespace); one that does not carry the NIC's alias is not provably ours and is left alone,
// as the residue audit, which lists every host link carrying a topology's markers, leaves it.
func (d *Driver) removeRecordedLinks(containerID string, owner substrate.Owner) error {
	sc, err := d.readSidecar(containerID)
	if err != nil {
		return err
	}
	if sc.Marker == owner.Marker() {
		names := make([]string, 0, len(sc.NICs))
		for name := range sc.NICs {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			if err := deleteHostLinkIfMarked(sc.NICs[name].HostIf, nicAlias(owner, name)); err != nil {
				return err
			}
		}
	}
	return d.removeSidecar(containerID)
}

// maxExecOutput bounds each captured stream of a guest command.
const maxExecOutput = 16 << 20

// Exec runs req.Argv in the container through the exec API. req.Env reaches the daemon for this
// call only. When ctx or req.Timeout ends first, the process is killed from the host (the
// daemon reports its host pid; the Engine API has no exec kill) and the call returns ctx's error.
func (d *Driver) Exec(ctx context.Context, node substrate.Handle, req substrate.ExecRequest) (substrate.ExecResult, error) {
	what := "exec in container " + short(node.ExternalID)
	if len(req.Argv) == 0 {
		return substrate.ExecResult{}, fmt.Errorf("%s: empty argv", what)
	}
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	ex, err := d.cli.ContainerExecCreate(ctx, node.ExternalID, container.ExecOptions{
		Cmd: req.Argv, Env: envList(req.Env), AttachStdout: true, AttachStderr: true, AttachStdin: req.Stdin != nil,
	})
	if err != nil {
		return substrate.ExecResult{}, d.containerErr(what, node.ExternalID, err)
	}
	att, err := d.cli.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return substrate.ExecResult{}, apiErr(what, err)
	}
	defer att.Close()
	if req.Stdin != nil {
		go func() {
			_, _ = att.Conn.Write(req.Stdin)
			_ = att.CloseWrite()
		}()
	}
	var stdout, stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(&limitWriter{w: &stdout, n: maxExecOutput}, &limitWriter{w: &stderr, n: maxExecOutput}, att.Reader)
		done <- err
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		d.killExec(ex.ID)
		<-done // the copy ends once the process is gone and the stream closes
		return substrate.ExecResult{ExitCode: -1, Stdout: stdout.Bytes(), Stderr: stderr.Bytes()},
			fmt.Errorf("%s: %s: %w", what, strings.Join(req.Argv, " "), ctx.Err())
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return substrate.ExecResult{}, apiErr(what, err)
	}
	st, err := d.cli.ContainerExecInspect(ctx, ex.ID)
	if err != nil {
		return substrate.ExecResult{}, apiErr(what, err)
	}
	return substrate.ExecResult{ExitCode: st.ExitCode, Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}, nil
}

// killExec kills a still-running exec'd process from the host (the Engine API has no exec kill):
// its process group first, then the process itself. The daemon reports the host pid.
func (d *Driver) killExec(execID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := d.cli.ContainerExecInspect(ctx, execID)
	if err != nil || !st.Running || st.Pid <= 1 {
		return
	}
	if pgid, err := syscall.Getpgid(st.Pid); err == nil && pgid == st.Pid {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	_ = syscall.Kill(st.Pid, syscall.SIGKILL)
}

// limitWriter keeps the first n bytes and discards the rest, never failing the copy.
type limitWriter struct {
	w io.Writer
	n int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := int64(len(p))
		if k > l.n {
			k = l.n
		}
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

// NewGeneration re-verifies the baseline image, quiesces the prior container by removing its
// NICs (so the replacement can take the same MACs and addresses), and creates the replacement
// container for spec. The prior container itself is left for the executor to delete.
func (d *Driver) NewGeneration(ctx context.Context, prior substrate.Handle, priorOwner substrate.Owner, spec substrate.NodeSpec) (substrate.Handle, error) {
	what := "reset node " + spec.Owner.Address
	if !spec.Owner.SameResource(priorOwner) || spec.Owner.Generation <= priorOwner.Generation {
		return substrate.Handle{}, fmt.Errorf("%s: new owner %+v is not a later generation of %+v", what, spec.Owner, priorOwner)
	}
	if spec.Artifact == nil {
		return substrate.Handle{}, fmt.Errorf("%s: no baseline artifact", what)
	}
	if err := d.VerifyArtifact(ctx, *spec.Artifact); err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: baseline: %w", what, err)
	}
	_, err := d.inspectOwned(ctx, what+": prior generation", prior, priorOwner)
	switch {
	case errors.Is(err, driver.ErrNotFound):
	case err != nil:
		return substrate.Handle{}, err
	default:
		if err := removeHostLinksOf(priorOwner); err != nil {
			return substrate.Handle{}, fmt.Errorf("%s: quiesce prior generation: %w", what, err)
		}
	}
	return d.CreateNode(ctx, spec)
}

// importLabels are the docker run flags that make a container importable as owner.
func importLabels(o substrate.Owner) string {
	return fmt.Sprintf("--network none --label %s=%s --label %s=%s --label %s=%s --label %s=%d",
		labelTopology, o.Topology, labelAddress, o.Address, labelType, o.Type, labelGeneration, o.Generation)
}

// ImportNode adopts an existing container whose labels prove it belongs to owner (see the
// package documentation for the rule) and normalizes what it finds: the handle, the image as an
// artifact identity, the command, and the NICs sysbox wired into it.
func (d *Driver) ImportNode(ctx context.Context, externalID string, owner substrate.Owner) (substrate.ImportedNode, error) {
	what := fmt.Sprintf("import %s from container %s", owner.Address, externalID)
	ins, err := d.cli.ContainerInspect(ctx, externalID)
	if err != nil {
		return substrate.ImportedNode{}, apiErr(what, err)
	}
	if err := checkOwned(what, ins.Config.Labels, owner); err != nil {
		return substrate.ImportedNode{}, fmt.Errorf("%w; a container is importable when created with %s", err, importLabels(owner))
	}
	if ins.HostConfig == nil || ins.HostConfig.NetworkMode != "none" {
		return substrate.ImportedNode{}, fmt.Errorf("%s: network mode must be \"none\" (sysbox wires NICs from the host): %w", what, driver.ErrInvalid)
	}
	out := substrate.ImportedNode{
		Handle:  nodeHandle(nodePrivate{ContainerID: ins.ID, Name: strings.TrimPrefix(ins.Name, "/"), ImageID: ins.Image, Marker: owner.Marker()}),
		Command: append(append([]string{}, ins.Config.Entrypoint...), ins.Config.Cmd...),
	}
	img, err := d.cli.ImageInspect(ctx, ins.Image)
	if err != nil {
		return substrate.ImportedNode{}, apiErr(what+": image "+ins.Image, err)
	}
	art := &substrate.ArtifactIdentity{Kind: KindOCIImage, Source: "docker-image:" + img.ID,
		Architecture: img.Architecture, GuestFamily: img.Os, Digest: img.ID, Ref: img.ID}
	for _, t := range img.RepoTags {
		if hex, ok := strings.CutPrefix(t, artifactRepo+":"); ok {
			art.Digest = "sha256:" + hex // the archive this image was loaded from
		}
	}
	out.Artifact = art
	if ins.State != nil && ins.State.Running && ins.State.Pid > 0 {
		nics, err := listMarkedLinks(ins.State.Pid)
		if err != nil {
			return substrate.ImportedNode{}, fmt.Errorf("%s: %w", what, err)
		}
		for _, n := range nics {
			if n.Owner.Equal(owner) {
				out.Attachments = append(out.Attachments, n.attachmentState())
			}
		}
	}
	return out, nil
}

// Residue lists the containers and host-side NICs carrying topology's markers.
func (d *Driver) Residue(ctx context.Context, topology string) ([]substrate.Object, error) {
	list, err := d.listOwned(ctx, topology, "")
	if err != nil {
		return nil, fmt.Errorf("residue of topology %s: %w", topology, err)
	}
	var out []substrate.Object
	for _, c := range list {
		o, _ := ownerFromLabels(c.Labels)
		out = append(out, substrate.Object{Kind: "container", ExternalID: c.ID, Owner: o})
	}
	links, err := hostMarkedLinks()
	if err != nil {
		return nil, fmt.Errorf("residue of topology %s: %w", topology, err)
	}
	for _, l := range links {
		if l.Owner.Topology == topology {
			out = append(out, substrate.Object{Kind: "veth", ExternalID: l.Name, Owner: l.Owner})
		}
	}
	records, err := d.sidecarResidue(topology)
	if err != nil {
		return nil, fmt.Errorf("residue of topology %s: %w", topology, err)
	}
	return append(out, records...), nil
}
