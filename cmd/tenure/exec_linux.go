package main

import "syscall"

// childAttr starts the command in its own process group (so that signals
// reach all of it) and has the kernel kill it if tenure itself dies
// (kill -9, a crash): without tenure nothing renews the lease, so the
// command must not run on beside the next holder. The parent of the
// death signal is the thread that started the command; runExec keeps its
// goroutine on that thread until the command ends.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
