package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	tenure "github.com/tenurehq/tenure/client"
)

const execHelp = `Run COMMAND only while holding a lease on RESOURCE (like consul lock or
etcdctl lock): acquire the lease first (queueing up to --wait if it is held),
then start the command, keeping the lease alive with heartbeats while it runs.

  - SIGINT, SIGTERM and SIGHUP are forwarded to the command.
  - If the lease is lost (revoked, expired, or no renewal confirmed within its
    trust window), the command is sent SIGTERM, then SIGKILL after --grace.
    The default grace is the lease's safety margin (a tenth of the ttl, at
    least 0.5 s): a command cut off from the registrar is gone by the time its
    lease can expire there, so the next holder never overlaps it. A longer
    --grace lets a command shut down cleanly at the price of that overlap.
  - A revoked lease is free at once; the command hears of it as soon as the
    registrar tells the heartbeat stream (at once, or, in the lease's first
    ttl/3, at its first renewal), then is stopped as above: it may overlap
    the next holder for that long plus the grace. Where overlap must never
    happen, pass the fence (below) to storage that checks fences.
  - When the command ends the lease is released.
  - If tenure itself dies (kill -9, a crash), its command's process group
    is killed (SIGKILL) by a guard process tenure starts beside it: nothing
    renews the lease any more. If tenure stalls (stopped, frozen, starved
    of CPU) while the command runs on, the guard stops the command as
    above once the lease's trust window passes. Processes the command moved
    to a group or session of their own (setsid, a daemon) are not reached.

The command runs in its own process group, so signals reach its children too.
It sees TENURE_LEASE_ID, TENURE_LEASE_FENCE, TENURE_LEASE_RESOURCE and
TENURE_LEASE_HOLDER in its environment; pass the fence to storage that checks
fences.

Exit status: the command's (128+N if it was killed by signal N); 1 if the
lease could not be acquired, or if it was lost and the command still exited 0;
127 if the command could not be started. --conflict-exit-code sets another
status for a resource held by someone else (LEASE_HELD, also when --wait ran
out), as flock's -E does, to tell "busy" from the command's own failure.`

const execExamples = `  tenure exec backups/nightly --ttl 30s -- ./backup.sh --full
  tenure exec reports/daily --wait 10m --grace 30s -- make report`

// exitStatus is an error that sets the exit status of tenure, for
// commands (exec) that pass on another program's. msg, if not empty, is
// printed to stderr.
type exitStatus struct {
	code int
	msg  string
}

func (e *exitStatus) Error() string {
	if e.msg != "" {
		return e.msg
	}
	return "exit status " + strconv.Itoa(e.code)
}

// runExec is `tenure exec`.
func runExec(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure exec", "RESOURCE [flags] -- COMMAND [ARGS...]", execHelp, execExamples, stdout, stderr)
	ttl := c.fs.Duration("ttl", 15*time.Second, "lease ttl: how long a crashed tenure blocks the next holder")
	wait := c.fs.Duration("wait", 0, "queue for up to this long when the resource is held (0: fail at once with LEASE_HELD)")
	grace := c.fs.Duration("grace", 0, "after SIGTERM on a lost lease, wait this long before SIGKILL (default: the lease's safety margin, ttl/10, at least 0.5s)")
	mode := c.fs.String("mode", "exclusive", "exclusive or shared")
	conflict := c.fs.Int("conflict-exit-code", 1, "exit status when the resource is held by someone else (LEASE_HELD), 0-255")
	c.holderFlag("", "user@host:pid")
	pos, err := c.parse(args, 1, -1)
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		return c.usageError("missing COMMAND: give it after the resource and --, as in tenure exec %s -- ./job.sh", pos[0])
	}
	m, err := parseMode(*mode)
	if err != nil {
		return c.usageError("%v", err)
	}
	// The Go client takes a zero ttl for "the policy default", so a
	// non-positive --ttl cannot reach the server: refuse it here.
	if *ttl <= 0 {
		return c.usageError("--ttl must be positive, got %v", *ttl)
	}
	if err := c.notNegative("wait", *wait); err != nil {
		return err
	}
	if err := c.notNegative("grace", *grace); err != nil {
		return err
	}
	if *conflict < 0 || *conflict > 255 {
		return c.usageError("--conflict-exit-code must be between 0 and 255, got %d", *conflict)
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	opts := []tenure.AcquireOption{m, tenure.TTL(*ttl)}
	if *wait > 0 {
		opts = append(opts, tenure.Wait(*wait))
	}
	// SIGINT/SIGTERM cancel ctx (main), which abandons a wait in the queue.
	l, err := cl.Acquire(ctx, pos[0], opts...)
	if errors.Is(err, tenure.ErrLeaseHeld) && *conflict != 1 {
		return &exitStatus{code: *conflict, msg: err.Error()}
	}
	if err != nil {
		return err
	}

	if !c.given("grace") {
		*grace = l.SafetyMargin()
	}

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	cmd := exec.Command(pos[1], pos[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(),
		"TENURE_LEASE_ID="+l.ID(),
		"TENURE_LEASE_FENCE="+strconv.FormatUint(l.Fence(), 10),
		"TENURE_LEASE_RESOURCE="+l.Resource(),
		"TENURE_LEASE_HOLDER="+l.Holder(),
	)
	cmd.SysProcAttr = childAttr()
	// The death signal follows the thread that starts the command: stay
	// on it until the command ends.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		release(l)
		return &exitStatus{code: 127, msg: fmt.Sprintf("tenure exec: %v", err)}
	}
	pgid := cmd.Process.Pid
	g, err := startGuard(pgid, *grace, l.TrustedUntil())
	if err != nil {
		fmt.Fprintf(stderr, "tenure exec: no guard for the command's process group (%v): if tenure is killed or stalls, what the command started may run on\n", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		if g != nil {
			g.done()
		}
		close(exited)
	}()
	// The guard hears how long the lease is trusted for, often enough
	// that it never runs out while tenure runs.
	var refresh <-chan time.Time
	if g != nil {
		tick := time.NewTicker(min(max(l.SafetyMargin()/4, 50*time.Millisecond), 250*time.Millisecond))
		defer tick.Stop()
		refresh = tick.C
	}
	lostCh := l.Done()
	var lost error
	var kill <-chan time.Time
wait:
	for {
		select {
		case <-exited:
			break wait
		case s := <-sigs:
			_ = syscall.Kill(-pgid, s.(syscall.Signal))
		case <-refresh:
			g.trusted(l.TrustedUntil())
		case <-lostCh:
			lostCh, refresh = nil, nil
			if g != nil {
				g.lost()
			}
			lost = lostError(l)
			fmt.Fprintf(stderr, "tenure exec: %v; stopping the command (SIGTERM, SIGKILL after %v)\n", lost, *grace)
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			t := time.NewTimer(*grace)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	}
	if lost == nil {
		release(l)
	}
	code := exitCode(cmd.ProcessState)
	if lost != nil && code == 0 {
		return lost
	}
	return &exitStatus{code: code}
}

// release ends the lease once the command is done.
func release(l *tenure.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = l.Release(ctx, tenure.ReleaseCompleted) // on failure it ends at its expiry
}

// exitCode is a process's exit status as a shell reports it.
func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
