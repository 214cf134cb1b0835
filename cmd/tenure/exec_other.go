//go:build !linux

package main

import "syscall"

// childAttr starts the command in its own process group. Only Linux has
// the kernel kill it when tenure dies; elsewhere the guard does
// (startGuard).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
