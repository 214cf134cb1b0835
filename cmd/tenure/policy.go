package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/registrar"
)

// policySetting is one field of a namespace policy that a command line
// can set: tenure server (the server-wide defaults) and tenure policy set.
type policySetting struct {
	name, usage string
	// set parses v into p; an error says what v should be.
	set func(p *registrar.Policy, v string) error
}

func durationSetting(name, usage string, field func(*registrar.Policy) *int64) policySetting {
	return policySetting{name, usage, func(p *registrar.Policy, v string) error {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			return fmt.Errorf("%q is not a duration (e.g. 30s, 5m, 2h)", v)
		case d < 0:
			return fmt.Errorf("must not be negative, got %s", v)
		}
		*field(p) = registrar.Ms(d)
		return nil
	}}
}

func countSetting[T uint32 | uint64](name, usage string, field func(*registrar.Policy) *T) policySetting {
	return policySetting{name, usage, func(p *registrar.Policy, v string) error {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || uint64(T(n)) != n {
			return fmt.Errorf("%q is not a whole number in range", v)
		}
		*field(p) = T(n)
		return nil
	}}
}

// sizeSetting is a count of bytes: a whole number, or one with a unit
// (500MB, 1GiB).
func sizeSetting(name, usage string, field func(*registrar.Policy) *uint64) policySetting {
	return policySetting{name, usage, func(p *registrar.Policy, v string) error {
		n, err := parseSize(v)
		if err != nil {
			return err
		}
		*field(p) = uint64(n)
		return nil
	}}
}

// policySettings are the settable fields, by flag name.
var policySettings = []policySetting{
	durationSetting("default-ttl", "ttl of a request that names none (default 1m)", func(p *registrar.Policy) *int64 { return &p.DefaultTTL }),
	durationSetting("min-ttl", "shortest ttl a request may name (default 1s)", func(p *registrar.Policy) *int64 { return &p.MinTTL }),
	durationSetting("max-ttl", "longest ttl a request may name (default 5m)", func(p *registrar.Policy) *int64 { return &p.MaxTTL }),
	countSetting("max-renewals", "renewals per lease, 0 unlimited (default 0)", func(p *registrar.Policy) *uint32 { return &p.MaxRenewals }),
	durationSetting("max-lifetime", "longest life of a lease from its grant, 0 unlimited (default 0)", func(p *registrar.Policy) *int64 { return &p.MaxLifetime }),
	durationSetting("max-grace", "longest restart grace, at most 15s (default 15s)", func(p *registrar.Policy) *int64 { return &p.MaxGrace }),
	countSetting("max-active-per-holder", "active leases per holder (default 10000)", func(p *registrar.Policy) *uint64 { return &p.MaxActivePerHolder }),
	countSetting("max-active-per-namespace", "active leases per namespace (default 1000000)", func(p *registrar.Policy) *uint64 { return &p.MaxActivePerNamespace }),
	countSetting("max-waiters-per-resource", "queued acquires per resource (default 1000)", func(p *registrar.Policy) *uint64 { return &p.MaxWaitersPerResource }),
	durationSetting("lease-retention", "how long ended leases stay readable (default 1h)", func(p *registrar.Policy) *int64 { return &p.LeaseRetention }),
	durationSetting("history-retention", "how long a resource's history is kept (default 24h; History reads an in-memory feed of the latest records of all namespaces, then the member's ledger files, up to 256 MiB of them per call: when that does not reach back, its answer's oldestIndex says how far it does)", func(p *registrar.Policy) *int64 { return &p.HistoryRetention }),
	countSetting("max-retained-leases", "ended leases kept per namespace (default 100000)", func(p *registrar.Policy) *uint64 { return &p.MaxRetainedLeases }),
	countSetting("max-retained-tasks", "finished queue tasks kept per namespace (default 100000)", func(p *registrar.Policy) *uint64 { return &p.MaxRetainedTasks }),
	durationSetting("dead-task-retention", "how long a dead queue task (attempts used up) stays readable and retryable (default 24h; other finished tasks: --lease-retention)", func(p *registrar.Policy) *int64 { return &p.DeadTaskRetention }),
	sizeSetting("max-state-bytes", "guarded state a namespace may hold, bytes (or with a unit: 512MiB), each blob plus 256 (default 256MiB)", func(p *registrar.Policy) *uint64 { return &p.MaxStateBytes }),
	countSetting("max-pending-tasks", "unfinished queue tasks per namespace (default 1000000)", func(p *registrar.Policy) *uint64 { return &p.MaxPendingTasks }),
	sizeSetting("max-pending-task-bytes", "payload bytes of a namespace's unfinished queue tasks (or with a unit: 2GiB) (default 1GiB)", func(p *registrar.Policy) *uint64 { return &p.MaxPendingTaskBytes }),
	countSetting("max-pool-pieces", "pieces of all a namespace's pools' files (default 16777216)", func(p *registrar.Policy) *uint64 { return &p.MaxPoolPieces }),
	countSetting("task-max-renewals", "renewals of a queue task's lease, 0 unlimited (default 10)", func(p *registrar.Policy) *uint32 { return &p.TaskMaxRenewals }),
	durationSetting("task-max-lifetime", "longest life of a queue task's lease from its claim, 0 unlimited (default 2h)", func(p *registrar.Policy) *int64 { return &p.TaskMaxLifetime }),
	{"always-certify", "sign a certificate for every grant and renewal: true or false (default false)", func(p *registrar.Policy, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%q is not true or false", v)
		}
		p.AlwaysCertify = b
		return nil
	}},
}

// policyFlags are the policy settings of one command line: string flags,
// empty when not given.
type policyFlags struct {
	fs      *flag.FlagSet
	vals    []*string
	withEnv bool
}

// source names where setting name's value came from: its flag, or (not
// given on the command line) its TENURE_* variable.
func (pf *policyFlags) source(name string) string {
	if pf.withEnv {
		return flagSource(pf.fs, name)
	}
	return "--" + name
}

// envName is the TENURE_* variable of a server flag.
func envName(flagName string) string {
	return "TENURE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// addPolicyFlags defines a flag per setting on fs; withEnv takes each
// default from its TENURE_* variable and says so (tenure server).
func addPolicyFlags(fs *flag.FlagSet, withEnv bool) *policyFlags {
	pf := &policyFlags{fs: fs, withEnv: withEnv}
	for _, s := range policySettings {
		def, usage := "", s.usage
		if withEnv {
			def = env(s.name, "")
			usage += " (env " + envName(s.name) + ")"
		}
		pf.vals = append(pf.vals, fs.String(s.name, def, usage))
	}
	return pf
}

// overlay returns what the given settings do to a policy (nil when none
// is given), after checking each, and, with overDefaults, that they make a
// valid policy of the defaults of API.md. file, when set, is a JSON object
// of settings by flag name ({"max-ttl": "10m", "max-renewals": 20}); the
// flags win over it.
func (pf *policyFlags) overlay(file string, overDefaults bool) (func(registrar.Policy) registrar.Policy, error) {
	type given struct {
		s policySetting
		v string
	}
	var set []given
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, usagef("--policy-file: %v", err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, usagef("--policy-file %s: not a JSON object of settings (e.g. {\"max-ttl\": \"10m\", \"max-renewals\": 20}): %v", file, err)
		}
		for _, s := range policySettings {
			raw, ok := m[s.name]
			if !ok {
				continue
			}
			delete(m, s.name)
			v := string(raw)
			var str string
			if json.Unmarshal(raw, &str) == nil {
				v = str
			}
			if err := s.set(&registrar.Policy{}, v); err != nil {
				return nil, usagef("--policy-file %s: %s: %v", file, s.name, err)
			}
			set = append(set, given{s, v})
		}
		for k := range m {
			return nil, usagef("--policy-file %s: unknown setting %q (the settings are the policy flags' names: tenure server --help)", file, k)
		}
	}
	for i, s := range policySettings {
		if v := *pf.vals[i]; v != "" {
			if err := s.set(&registrar.Policy{}, v); err != nil {
				return nil, usagef("%s: %v", pf.source(s.name), err)
			}
			set = append(set, given{s, v})
		}
	}
	if len(set) == 0 {
		return nil, nil
	}
	apply := func(base registrar.Policy) registrar.Policy {
		for _, g := range set {
			_ = g.s.set(&base, g.v) // checked above
		}
		return base
	}
	if err := apply(registrar.DefaultPolicy()).Validate(); overDefaults && err != nil {
		return nil, usagef("the policy settings given: %v", err)
	}
	return apply, nil
}

const policyHelp = `Read or change a namespace's policy (set: admin). "*" names the server-wide
defaults, which every namespace without a policy of its own follows.

  policy get [NAMESPACE]          the policy in force (default: --namespace)
  policy set NAMESPACE [flags]    change the settings given; the others stay as
                                  they are in force now

Durations as 30s, 5m, 2h. The server's defaults can also be given when it
starts: tenure server takes the same flags (see tenure server --help).`

const policyExamples = `  tenure policy get
  tenure policy get '*'
  tenure policy set agents --max-ttl 10m --max-renewals 20 --max-lifetime 2h
  tenure policy set '*' --max-active-per-holder 500`

// runPolicy is `tenure policy get|set`.
func runPolicy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure policy", "get [NAMESPACE] | set NAMESPACE [flags]", policyHelp, policyExamples, stdout, stderr)
	pf := addPolicyFlags(c.fs, false)
	pos, err := c.parse(args, 1, 2)
	if err != nil {
		return err
	}
	ns := c.namespace
	if len(pos) == 2 {
		ns = pos[1]
		c.namespace = ns // routed by the namespace it names (--routes)
	}
	apply, err := pf.overlay("", false) // the registrar checks the policy it makes
	var ue *usageError
	if errors.As(err, &ue) {
		return c.usageError("%v", err)
	}
	if err != nil {
		return err
	}
	switch {
	case pos[0] != "get" && pos[0] != "set":
		return c.usageError("%s", unknownSubcommand(pos[0], "get", "set"))
	case pos[0] == "get" && apply != nil:
		return c.usageError("get takes no settings; did you mean set?")
	case pos[0] == "set" && len(pos) < 2:
		return c.usageError("set: name the namespace (\"*\" for the server-wide defaults)")
	case pos[0] == "set" && apply == nil:
		return c.usageError("set: give at least one setting (e.g. --max-ttl 10m)")
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	cur, err := clusterCall(ctx, r, tenurev1connect.ClusterServiceClient.GetPolicy, &tenurev1.GetPolicyRequest{Namespace: ns})
	if err != nil {
		return err
	}
	out := cur.GetPolicy()
	if pos[0] == "set" {
		want := apply(registrar.PolicyFromProto(registrar.Policy{}, out))
		resp, err := clusterCall(ctx, r, tenurev1connect.ClusterServiceClient.SetPolicy, &tenurev1.SetPolicyRequest{Namespace: ns, Policy: want.ProtoToSet()})
		if err != nil {
			return err
		}
		out = resp.GetPolicy()
	}
	if c.json() {
		return writeJSON(stdout, out)
	}
	return writePolicy(stdout, out)
}

// writePolicy prints a policy as a table, one setting per line, by the
// flag names.
func writePolicy(w io.Writer, pb *tenurev1.NamespacePolicy) error {
	p := registrar.PolicyFromProto(registrar.Policy{}, pb)
	d := func(ms int64) string { return fmtDuration(time.Duration(ms) * time.Millisecond) }
	orDefault := func(s string, zero bool, def string) string {
		if zero {
			return def
		}
		return s
	}
	unlimited := func(s string, zero bool) string {
		if zero {
			return "unlimited"
		}
		return s
	}
	tw := newTable(w)
	for _, row := range [][2]string{
		{"default-ttl", d(p.DefaultTTL)}, {"min-ttl", d(p.MinTTL)}, {"max-ttl", d(p.MaxTTL)},
		{"max-renewals", unlimited(strconv.FormatUint(uint64(p.MaxRenewals), 10), p.MaxRenewals == 0)},
		{"max-lifetime", unlimited(d(p.MaxLifetime), p.MaxLifetime == 0)},
		{"max-grace", d(p.MaxGrace)},
		{"max-active-per-holder", strconv.FormatUint(p.MaxActivePerHolder, 10)},
		{"max-active-per-namespace", strconv.FormatUint(p.MaxActivePerNamespace, 10)},
		{"max-waiters-per-resource", strconv.FormatUint(p.MaxWaitersPerResource, 10)},
		{"lease-retention", d(p.LeaseRetention)}, {"history-retention", d(p.HistoryRetention)},
		{"max-retained-leases", strconv.FormatUint(p.MaxRetainedLeases, 10)},
		{"max-retained-tasks", strconv.FormatUint(p.MaxRetainedTasks, 10)},
		{"dead-task-retention", orDefault(d(p.DeadTaskRetention), p.DeadTaskRetention == 0, "24h (default)")},
		{"always-certify", strconv.FormatBool(p.AlwaysCertify)},
		{"max-state-bytes", strconv.FormatUint(p.MaxStateBytes, 10)},
		{"max-pending-tasks", strconv.FormatUint(p.MaxPendingTasks, 10)},
		{"max-pending-task-bytes", strconv.FormatUint(p.MaxPendingTaskBytes, 10)},
		{"max-pool-pieces", strconv.FormatUint(p.MaxPoolPieces, 10)},
		{"task-max-renewals", unlimited(strconv.FormatUint(uint64(p.TaskMaxRenewals), 10), p.TaskMaxRenewals == 0)},
		{"task-max-lifetime", unlimited(d(p.TaskMaxLifetime), p.TaskMaxLifetime == 0)},
	} {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	}
	return tw.Flush()
}
