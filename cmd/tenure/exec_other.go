//go:build !linux

package main

import "syscall"

// childAttr starts the command in its own process group. Only Linux can
// have the kernel kill it when tenure dies; elsewhere a tenure killed
// with SIGKILL leaves the command running (stop it with tenure's signals).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
