package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
)

// guardCommand is the hidden command line of the exec guard: tenure
// __exec-guard PGID.
const guardCommand = "__exec-guard"

// guardDone is what tenure exec writes to its guard when the command has
// ended and nothing is left to stop.
const guardDone = 'x'

// startGuard starts the guard of process group pgid: a second tenure
// process that holds the read end of a pipe whose write end only this
// process holds. When this process dies however it dies (kill -9
// included) the pipe closes, and the guard kills the whole group with
// SIGKILL: the command and whatever it started in its group (sh -c "a;
// b" runs b as a grandchild, which the parent-death signal does not
// reach). done tells the guard that the command ended by itself.
func startGuard(pgid int) (done func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	g := exec.Command(self, guardCommand, strconv.Itoa(pgid))
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
	return func() {
		_, _ = w.Write([]byte{guardDone})
		_ = w.Close()
		_ = g.Wait()
	}, nil
}

// runGuard is the guard's side: it waits for its pipe to end, and unless
// tenure said the command is done, kills the command's process group.
func runGuard(args []string) int {
	if len(args) != 1 {
		return 2
	}
	pgid, err := strconv.Atoi(args[0])
	if err != nil || pgid <= 1 {
		return 2
	}
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	var b [1]byte
	if n, _ := io.ReadFull(os.Stdin, b[:]); n == 1 && b[0] == guardDone {
		return 0
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
		fmt.Fprintf(os.Stderr, "tenure exec: stopping the command's process group %d: %v\n", pgid, err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "tenure exec: tenure ended before the command; killed its process group %d\n", pgid)
	return 0
}
