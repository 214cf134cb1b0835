package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// guardCommand is the hidden command line of the exec guard: tenure
// __exec-guard PGID GRACE_MS TRUSTED_MS (the lease's trust left as it
// starts: a tenure that stalls before its first message is covered too).
const guardCommand = "__exec-guard"

// What tenure exec writes to its guard, one byte each, guardTrusted
// followed by 8 bytes (big endian): the milliseconds the lease is
// trusted for from now.
const (
	guardDone    = 'x' // the command ended: nothing is left to stop
	guardTrusted = 't' // the lease is trusted for the next N ms
	guardLost    = 'l' // tenure itself stops the command (the lease was lost)
)

// guard is tenure exec's side of its guard: a second tenure process that
// holds the read end of a pipe whose write end only this process holds.
//
//   - When this process dies however it dies (kill -9 included) the pipe
//     closes, and the guard kills the whole group with SIGKILL: the command
//     and whatever it started in its group (sh -c "a; b" runs b as a
//     grandchild, which the parent-death signal does not reach).
//   - When this process stalls (stopped, frozen, starved of CPU) it stops
//     telling the guard how long its lease is trusted for; the guard then
//     stops the command as tenure would on a lost lease (SIGTERM, SIGKILL
//     after the grace) once the last trust it heard of has passed, so that
//     the command does not run on beside the lease's next holder.
type guard struct {
	w    *os.File
	wait func() error
}

// startGuard starts the guard of process group pgid, whose command is
// given grace between SIGTERM and SIGKILL, for a lease trusted until
// trustedUntil.
func startGuard(pgid int, grace time.Duration, trustedUntil time.Time) (*guard, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	g := exec.Command(self, guardCommand, strconv.Itoa(pgid), strconv.FormatInt(grace.Milliseconds(), 10),
		strconv.FormatInt(trustedMs(trustedUntil), 10))
	g.Stdin, g.Stderr = r, os.Stderr
	// Its own process group: a Ctrl-C to tenure's group does not end
	// the guard before tenure has passed the signal on.
	g.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = g.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, err
	}
	return &guard{w: w, wait: g.Wait}, nil
}

// trusted tells the guard the lease is trusted until until.
func (g *guard) trusted(until time.Time) {
	var b [9]byte
	b[0] = guardTrusted
	binary.BigEndian.PutUint64(b[1:], uint64(trustedMs(until)))
	_, _ = g.w.Write(b[:])
}

// trustedMs is the time left until until, in whole ms (0 once passed).
func trustedMs(until time.Time) int64 { return max(time.Until(until).Milliseconds(), 0) }

// lost tells the guard that tenure stops the command itself.
func (g *guard) lost() { _, _ = g.w.Write([]byte{guardLost}) }

// done tells the guard the command ended, and waits for it to exit.
func (g *guard) done() {
	_, _ = g.w.Write([]byte{guardDone})
	_ = g.w.Close()
	_ = g.wait()
}

// runGuard is the guard's side: it reads tenure's messages until its pipe
// ends, and unless tenure said the command is done, kills the command's
// process group; and it stops the group when the trust tenure last told
// it of passes without a word.
func runGuard(args []string) int {
	if len(args) != 3 {
		return 2
	}
	pgid, err := strconv.Atoi(args[0])
	if err != nil || pgid <= 1 {
		return 2
	}
	graceMs, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil || graceMs < 0 {
		return 2
	}
	trustedFor, err := strconv.ParseInt(args[2], 10, 64)
	if err != nil || trustedFor < 0 {
		return 2
	}
	grace := time.Duration(graceMs) * time.Millisecond
	// A moment past the trust: tenure, alive, stops the command itself at
	// the trust's end (guardLost).
	slack := min(grace/2, 250*time.Millisecond)
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)

	msgs := make(chan guardMsg)
	go readGuardMsgs(os.Stdin, msgs)
	timer := time.NewTimer(time.Duration(trustedFor)*time.Millisecond + slack)
	deadline := timer.C
	stopTimer := func() {
		timer.Stop()
		deadline = nil
	}
	termed := false
	for {
		select {
		case m, ok := <-msgs:
			switch {
			case !ok:
				return guardKill(pgid, "tenure ended before the command")
			case m.kind == guardDone:
				return 0
			case m.kind == guardLost:
				stopTimer()
			case m.kind == guardTrusted && !termed:
				stopTimer()
				timer = time.NewTimer(m.trusted + slack)
				deadline = timer.C
			}
		case <-deadline:
			if !termed {
				termed = true
				fmt.Fprintf(os.Stderr, "tenure exec: tenure did not confirm the lease before its trust window passed (stopped or stalled); "+
					"stopping the command (SIGTERM, SIGKILL after %v)\n", grace)
				if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && err != syscall.ESRCH {
					fmt.Fprintf(os.Stderr, "tenure exec: stopping the command's process group %d: %v\n", pgid, err)
				}
				timer = time.NewTimer(grace - slack)
				deadline = timer.C
				continue
			}
			deadline = nil
			if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
				fmt.Fprintf(os.Stderr, "tenure exec: stopping the command's process group %d: %v\n", pgid, err)
			}
		}
	}
}

// guardKill kills process group pgid, saying why.
func guardKill(pgid int, why string) int {
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
		fmt.Fprintf(os.Stderr, "tenure exec: stopping the command's process group %d: %v\n", pgid, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "tenure exec: %s; killed its process group %d\n", why, pgid)
	return 0
}

// guardMsg is one message from tenure exec.
type guardMsg struct {
	kind    byte
	trusted time.Duration
}

// readGuardMsgs sends the messages read from r to out, closing it at the
// pipe's end (or at anything it does not understand).
func readGuardMsgs(r io.Reader, out chan<- guardMsg) {
	defer close(out)
	var b [8]byte
	for {
		if _, err := io.ReadFull(r, b[:1]); err != nil {
			return
		}
		m := guardMsg{kind: b[0]}
		switch m.kind {
		case guardTrusted:
			if _, err := io.ReadFull(r, b[:]); err != nil {
				return
			}
			m.trusted = time.Duration(binary.BigEndian.Uint64(b[:])) * time.Millisecond
		case guardDone, guardLost:
		default:
			return
		}
		out <- m
	}
}
