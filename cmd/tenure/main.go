// Command tenure is Tenure's single binary: the server and the client
// commands, one file each. main only turns errors into exit codes: 0 on
// success, 1 on a Tenure error (its message, which starts with the reason,
// goes to stderr), 2 on a usage error, 128 + the signal's number when a
// signal cut it short; tenure exec passes on its command's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"regexp"
	"runtime/debug"
	"strings"
	"syscall"

	"connectrpc.com/connect"

	tenure "github.com/tenurehq/tenure/client"
)

// version is set at build time with -ldflags "-X main.version=…";
// otherwise it is "dev" and the commit Go stamped into the binary
// (go build in a git checkout), if any.
var version = devVersion("dev")

// devVersion is v, followed by the commit the binary was built from (and
// "-modified" for a dirty tree) when v is "dev" and the build says.
func devVersion(v string) string {
	bi, ok := debug.ReadBuildInfo()
	if v != "dev" || !ok {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision" && len(s.Value) >= 12:
			rev = s.Value[:12]
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-modified"
		}
	}
	if rev == "" {
		return v
	}
	return v + " (" + rev + dirty + ")"
}

// usageError is a mistake in the command line (exit status 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

const usage = `usage: tenure <command> [flags]   (tenure <command> --help for more)

commands:
  server      run a Tenure server
  acquire     acquire a lease (--hold: keep it until Ctrl-C)
  renew       renew leases
  release     release a lease
  get         print a lease
  ls          list leases
  watch       follow the ledger's events
  history     print a resource's events
  verify      check the current state of lease ids
  revoke      revoke a lease (admin)
  transfer    hand a lease over to another holder
  derive      derive a scoped, budgeted child lease for a sub-agent
  consume     charge a lease's budget counter
  authorize   ask whether a lease's scope allows a resource or action
  tree        print a lease and its derived leases with their budgets
  state       read or write a resource's guarded state (get, put)
  fence       check a fence (check)
  cert        verify a lease certificate offline (verify)
  audit       check, export or prune a node's durable ledger (verify, export, prune)
  cluster     status, join, remove, transfer-leader, snapshot, public-key, whoami
  backup      save a cluster's state to a file, inspect one, restore one into a new data dir
  policy      read or change a namespace's policy, or the server's defaults (get, set)
  exec        run a command while holding a lease
  queue       work queue: push, claim, complete, fail, cancel, retry, get, ls, list, stats, config
  bench       the load generator
  pool        the piece pool (create, want, request, complete, rankings, status, stats, leases, list, delete, reset-peer)
  version     print the version

flags of every client command (before or after it):
  --endpoints ADDR,…   API addresses (env TENURE_ENDPOINTS, default 127.0.0.1:7070)
  --namespace NS       (env TENURE_NAMESPACE, default "default")
  --routes NS=ADDR,…;… namespaces split across clusters: the endpoints of --namespace's
                       route (a name, a prefix-*, or *), unless --endpoints is given (env TENURE_ROUTES)
  --token TOKEN        bearer token (env TENURE_TOKEN); without --holder, act as its principal
  --tls-ca FILE        CA(s) to trust for TLS endpoints (env TENURE_TLS_CA)
  --tls-cert, --tls-key FILE   client certificate (env TENURE_TLS_CERT, TENURE_TLS_KEY)
  -o table|json        output format
  --stale              reads answered by the member asked, without the leader (may be behind)

exit status: 0 done; 1 the operation failed (the server refused it, or the network
or a file failed: stderr starts with the reason, and with -o json stdout carries
{"error":{"reason":…,"code":…,"message":…,"metadata":{…}}} unless the command
printed its result); 2 a usage error (a bad flag or argument: nothing was sent);
130 (143) interrupted by Ctrl-C (SIGTERM) before it was done (a queued acquire is
withdrawn); exec exits with its command's status.
`

// commands are the client subcommands, each in its own file.
var commands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"acquire":   runAcquire,
	"renew":     runRenew,
	"release":   runRelease,
	"get":       runGet,
	"ls":        runLs,
	"watch":     runWatch,
	"history":   runHistory,
	"verify":    runVerify,
	"revoke":    runRevoke,
	"transfer":  runTransfer,
	"derive":    runDerive,
	"consume":   runConsume,
	"authorize": runAuthorize,
	"tree":      runTree,
	"fence":     runFence,
	"cluster":   runCluster,
	"policy":    runPolicy,
	"exec":      runExec,
	"bench":     runBench,
	"queue":     runQueue,
	"pool":      runPool,
	"version":   runVersion,
	"audit":     runAudit,
	"backup":    runBackup,
	"state": func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return runState(ctx, args, os.Stdin, stdout, stderr)
	},
	"cert": func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return runCert(ctx, args, os.Stdin, stdout, stderr)
	},
}

// reasonFirst matches a message that starts with a reason ("LEASE_HELD: …"),
// which is printed as is; other errors get a "tenure: " prefix. This only
// decides presentation, never behaviour.
var reasonFirst = regexp.MustCompile(`^[A-Z][A-Z_]+: `)

func main() {
	if len(os.Args) > 1 && os.Args[1] == guardCommand {
		os.Exit(runGuard(os.Args[2:]))
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() { cancel(signalled{<-sigs}) }()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	signal.Stop(sigs)
	os.Exit(code)
}

// signalled is the cause of the command's context when a signal ended it.
type signalled struct{ os.Signal }

func (s signalled) Error() string { return "interrupted by " + s.String() }

// interruptedCode is the exit status of a command that failed (exit 1)
// after a signal cut it short: 128 + the signal's number, as a shell
// reports a command the signal killed (130 for Ctrl-C), so that a script
// tells an interrupted wait from a refusal. A command that ended well on
// the signal (a watch, a held lease released, a server shut down) keeps
// its 0, and exec its command's status.
func interruptedCode(ctx context.Context) int {
	var s signalled
	if !errors.As(context.Cause(ctx), &s) {
		return 1
	}
	if n, ok := s.Signal.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 1
}

// run executes one command line and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	out := &countingWriter{w: stdout}
	err := fileReason(dispatch(ctx, args, out, stderr))
	var ue *usageError
	var es *exitStatus
	if err != nil && !errors.Is(err, flag.ErrHelp) && !errors.As(err, &es) && out.n == 0 && wantsJSON(args) {
		// Scripts reading -o json get the error as JSON too (stderr has
		// it as text), unless the command printed its result already.
		writeErrorJSON(stdout, err)
	}
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "tenure: %v\n", err)
		return 2
	case errors.As(err, &es):
		if es.msg != "" {
			fmt.Fprintln(stderr, es.msg)
		}
		return es.code
	case reasonFirst.MatchString(err.Error()):
		fmt.Fprintln(stderr, err) // a Tenure error: its message starts with the reason
		if h := reasonHint(err); h != "" {
			fmt.Fprintln(stderr, "hint, if no tenure server ever answered at that address: "+strings.TrimPrefix(h, "hint: "))
		} else if h := credentialHint(err); h != "" {
			fmt.Fprintln(stderr, h)
		}
		return interruptedCode(ctx)
	default:
		var ce *connect.Error
		if errors.As(err, &ce) && ce.Code() != connect.CodeUnknown {
			// A transport's error, with no reason of Tenure's: its code
			// stands first, as a reason would ("UNAVAILABLE: dial tcp …").
			fmt.Fprintf(stderr, "%s: %s\n", strings.ToUpper(ce.Code().String()), ce.Message())
		} else {
			fmt.Fprintf(stderr, "tenure: %v\n", err)
		}
		if h := hint(err); h != "" {
			fmt.Fprintln(stderr, h)
		}
		return interruptedCode(ctx)
	}
}

// fileReason gives the error of a local file a command could not read or
// write a reason, so that stderr and -o json start with one as for any
// failure: INVALID_ARGUMENT for a file named on the command line that is
// missing or not one to use, UNAVAILABLE when the disk failed it (full,
// read-only, an I/O error: found from outside, a server whose disk filled
// said INVALID_ARGUMENT).
func fileReason(err error) error {
	var pe *fs.PathError
	var ue *usageError
	var es *exitStatus
	var ce *connect.Error
	if err == nil || reasonFirst.MatchString(err.Error()) || !errors.As(err, &pe) ||
		errors.As(err, &ue) || errors.As(err, &es) || errors.As(err, &ce) {
		return err
	}
	for _, e := range []error{syscall.ENOSPC, syscall.EDQUOT, syscall.EROFS, syscall.EIO} {
		if errors.Is(err, e) {
			return fmt.Errorf("UNAVAILABLE: %w", err)
		}
	}
	return fmt.Errorf("INVALID_ARGUMENT: %w", err)
}

// clientFlags are the flags every client command takes: true for those
// with a value, false for switches.
var clientFlags = map[string]bool{"endpoints": true, "routes": true, "namespace": true, "token": true, "tls-ca": true, "tls-cert": true, "tls-key": true, "o": true,
	"stale": false}

// subcommanded are the commands whose first argument is a subcommand.
var subcommanded = map[string]bool{"backup": true, "queue": true, "pool": true, "audit": true, "state": true, "fence": true, "cert": true, "policy": true}

// hoistFlags moves client flags given before the command to just after it
// (after its subcommand), where the command parses them:
// "tenure --endpoints a:1 ls" runs as "tenure ls --endpoints a:1".
func hoistFlags(args []string) []string {
	var lead []string
	for len(args) > 0 && len(args[0]) > 1 && args[0][0] == '-' {
		name, _, inline := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		valued, ok := clientFlags[name]
		if !ok || valued && !inline && len(args) < 2 {
			break
		}
		n := 2
		if inline || !valued {
			n = 1
		}
		lead, args = append(lead, args[:n]...), args[n:]
	}
	if len(lead) == 0 || len(args) == 0 {
		return append(lead, args...)
	}
	at := 1
	if subcommanded[args[0]] && len(args) > 1 {
		at = 2
	}
	out := append(append([]string{}, args[:at]...), lead...)
	return append(out, args[at:]...)
}

// hint suggests the usual cause of a transport error that does not name
// it: a plain-text client talking to a TLS server sees its connection
// dropped, and a certificate without the dialled address fails by name.
// reasonHint is the hint for an error that starts with a reason: an
// OUTCOME_UNKNOWN carries the transport's error, and a TLS server or a Raft
// port hangs up on a write as on a read (as does a server that crashed).
// None when a server gave the error (with Tenure's details: a follower's
// OUTCOME_UNKNOWN for a write it forwarded to a leader that died) or a
// held lease was lost.
func reasonHint(err error) string {
	var lost *lostLeaseError
	var ce *connect.Error
	if errors.As(err, &lost) || errors.As(err, &ce) && len(ce.Details()) > 0 {
		return ""
	}
	return hint(err)
}

// credentialHint is what a user of the command line does about an
// UNAUTHENTICATED answer, whose message speaks of HTTP headers.
func credentialHint(err error) string {
	switch tenure.ReasonOf(tenure.ParseError(err)) {
	case tenure.ReasonUnauthenticated:
		return "hint: give a token of the server's auth file with --token or env TENURE_TOKEN (tenure cluster whoami --token … says whose it is)"
	case tenure.ReasonNotLeader:
		if strings.Contains(err.Error(), "knows no leader") {
			return "hint: no member leads now (an election, or no majority of the members is up: tenure cluster status --stale); " +
				"a read answers from the member's own state with --stale (it may be behind)"
		}
	}
	return ""
}

func hint(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "not its Raft address"): // a join that says what is wrong already
		return ""
	case strings.Contains(msg, "doesn't contain any IP SANs"), strings.Contains(msg, "certificate is valid for"):
		return "hint: the server's certificate must name the address dialled (subjectAltName IP:… or DNS:…); see docs/security.md section 2"
	case strings.Contains(msg, "x509: certificate signed by unknown authority"):
		return "hint: give the CA that signed the server's certificate with --tls-ca (env TENURE_TLS_CA)"
	case strings.Contains(msg, "unexpected EOF"), strings.Contains(msg, "connection reset by peer"), strings.Contains(msg, "broken pipe"):
		return "hint: if the server serves TLS (--tls-cert), give --tls-ca or an https:// endpoint; " +
			"and check that the endpoint is Tenure's API address (--listen), not its Raft one (--raft-listen)"
	case strings.Contains(msg, "server gave HTTP response to HTTPS client"):
		return "hint: the server serves plain HTTP (no --tls-cert): use an http:// endpoint, or leave out --tls-ca"
	case strings.Contains(msg, "connection refused"):
		return "hint: nothing listens there: is a tenure server running at that address? (--endpoints or --routes, env TENURE_ENDPOINTS or TENURE_ROUTES; default 127.0.0.1:7070)"
	case strings.Contains(msg, "http2: frame too large"), strings.Contains(msg, "malformed HTTP response"):
		return "hint: the endpoint does not speak Tenure's API (HTTP/2): check that it is a tenure server's --listen address"
	}
	return ""
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	args = hoistFlags(args)
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usagef("no command given")
	}
	switch args[0] {
	case "server":
		return runServer(ctx, args[1:], stderr)
	case "help", "-h", "--help":
		if len(args) > 1 { // tenure help acquire: its --help
			return dispatch(ctx, []string{args[1], "--help"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return nil
	case "--version", "-version":
		args = []string{"version"}
	}
	if cmd, ok := commands[args[0]]; ok {
		return cmd(ctx, args[1:], stdout, stderr)
	}
	if strings.HasPrefix(args[0], "-") { // a flag where the command goes
		fmt.Fprint(stderr, usage)
		name, _, _ := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		if _, ok := clientFlags[name]; ok { // hoisted: nothing came after them
			return usagef("no command given (only flags: %s)", strings.Join(args, " "))
		}
		return usagef("%s before the command: give the command first, then its flags (tenure <command> [flags]; "+
			"only the flags every client command takes may also come before it)", args[0])
	}
	names := []string{"server", "help"}
	for name := range commands {
		names = append(names, name)
	}
	if s := suggestion(args[0], names); s != "" {
		return usagef("unknown command %q; did you mean %q? (usage: tenure --help)", args[0], s)
	}
	fmt.Fprint(stderr, usage)
	return usagef("unknown command %q", args[0])
}
