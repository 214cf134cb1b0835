package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
)

const clusterHelp = `Inspect and change cluster membership (admin).

  cluster status                            members, roles, leader, term, indexes
  cluster join ID RAFT_ADDR [--api-address] add a member as a voter
  cluster remove ID                         remove a member
  cluster transfer-leader [ID]              hand leadership to ID (or to any voter); also transfer-leadership
  cluster snapshot                          take a Raft snapshot of the member asked now (truncates its log)
  cluster public-key                        the registrar's certificate key, in hex (-o json: the API's JSON, bytes in base64)
  cluster whoami                            the principal, roles and namespaces of --token (or the client certificate)

join and remove refuse a change after which the voters the leader hears
from would not be a majority (the cluster would stop taking writes): a new
voter nothing answers for yet, or removing a member that is up while others
are down. --force makes the change anyway.`

const clusterExamples = `  tenure cluster status
  tenure cluster join node4 10.0.0.4:7071 --api-address 10.0.0.4:7070
  tenure cluster remove node4
  tenure cluster transfer-leader node2
  tenure cluster snapshot --endpoints 10.0.0.2:7070
  tenure cluster public-key > registrar.key
  TENURE_TOKEN=… tenure cluster whoami`

// runCluster is `tenure cluster …`.
func runCluster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure cluster", "status|join|remove|transfer-leader|snapshot|public-key|whoami [ARGS] [flags]", clusterHelp, clusterExamples, stdout, stderr)
	apiAddr := c.fs.String("api-address", "", "join: the new member's API address")
	force := c.fs.Bool("force", false, "join, remove: even when the cluster would lose its quorum")
	pos, err := c.parse(args, 1, 3)
	if err != nil {
		return err
	}
	sub, rest := pos[0], pos[1:]
	if sub == "transfer-leadership" { // the RPC's name
		sub = "transfer-leader"
	}
	nargs := map[string][2]int{"status": {0, 0}, "join": {2, 2}, "remove": {1, 1}, "transfer-leader": {0, 1}, "snapshot": {0, 0}, "public-key": {0, 0}, "whoami": {0, 0}}
	n, ok := nargs[sub]
	switch {
	case !ok:
		return c.usageError("%s", unknownSubcommand(sub, "status", "join", "remove", "transfer-leader", "snapshot", "public-key", "whoami"))
	case len(rest) < n[0]:
		return c.usageError("cluster %s: missing argument", sub)
	case len(rest) > n[1]:
		return c.usageError("cluster %s: unexpected argument %q", sub, rest[n[1]])
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	switch sub {
	case "status":
		st, err := clusterCall(ctx, r, tenurev1connect.ClusterServiceClient.Status, &tenurev1.StatusRequest{})
		if err != nil {
			return err
		}
		if c.json() {
			return writeJSON(stdout, st)
		}
		return printStatus(stdout, st)
	case "join":
		err = r.cluster(func(cl tenurev1connect.ClusterServiceClient) error {
			_, err := cl.AddVoter(ctx, connect.NewRequest(&tenurev1.AddVoterRequest{Id: rest[0], RaftAddress: rest[1], ApiAddress: *apiAddr, Force: *force}))
			return err
		})
		return done(c, err, &tenurev1.AddVoterResponse{}, "added %s as a voter", rest[0])
	case "remove":
		resp := &tenurev1.RemoveServerResponse{}
		err = r.cluster(func(cl tenurev1connect.ClusterServiceClient) error {
			out, err := cl.RemoveServer(ctx, connect.NewRequest(&tenurev1.RemoveServerRequest{Id: rest[0], Force: *force}))
			if err == nil {
				resp = out.Msg
			}
			return err
		})
		if !resp.GetWasMember() {
			return done(c, err, resp, "%s is not a member of the cluster (nothing to remove: removed already, or never one)", rest[0])
		}
		return done(c, err, resp, "removed %s", rest[0])
	case "transfer-leader":
		req := &tenurev1.TransferLeadershipRequest{}
		if len(rest) == 1 {
			req.Id = rest[0]
		}
		resp, err := clusterCall(ctx, r, tenurev1connect.ClusterServiceClient.TransferLeadership, req)
		if err != nil {
			return err
		}
		return done(c, nil, resp, "leader is now %s", resp.GetLeaderId())
	case "snapshot":
		resp, err := clusterCall(ctx, r, tenurev1connect.ClusterServiceClient.Snapshot, &tenurev1.SnapshotRequest{})
		if err != nil {
			return err
		}
		return done(c, nil, resp, "%s took a snapshot at index %d (term %d)", resp.GetNodeId(), resp.GetIndex(), resp.GetTerm())
	case "whoami":
		resp, err := clusterCall(ctx, r, tenurev1connect.ClusterServiceClient.WhoAmI, &tenurev1.WhoAmIRequest{})
		if err != nil {
			return err
		}
		if c.json() {
			return writeJSON(stdout, resp)
		}
		if !resp.GetAuthenticated() {
			_, err = fmt.Fprintln(stdout, "the server runs without authentication: every caller may do everything")
			return err
		}
		tw := newTable(stdout)
		fmt.Fprintf(tw, "principal\t%s\nroles\t%s\nnamespaces\t%s\nauthenticated by\t%s\n", resp.GetPrincipal(),
			strings.Join(resp.GetRoles(), ", "), strings.Join(resp.GetNamespaces(), ", "), resp.GetMethod())
		return tw.Flush()
	default: // public-key
		resp, err := clusterCall(ctx, r, tenurev1connect.ClusterServiceClient.PublicKey, &tenurev1.PublicKeyRequest{})
		if err != nil {
			return err
		}
		if c.json() {
			return writeJSON(stdout, resp)
		}
		_, err = fmt.Fprintln(stdout, hex.EncodeToString(resp.GetPublicKey()))
		return err
	}
}

// done prints the outcome of a cluster change.
func done(c *cliCommand, err error, resp proto.Message, format string, args ...any) error {
	if err != nil {
		return err
	}
	if c.json() {
		return writeJSON(c.stdout, resp)
	}
	_, err = fmt.Fprintf(c.stdout, format+"\n", args...)
	return err
}

// staleContact is how long a follower may go without hearing from its
// leader before status says so (heartbeats come every 0.1 s by default).
const staleContact = 500 * time.Millisecond

// laggingBehind is how many entries behind the leader's commit index a
// member's applied index may be before status says so (a busy cluster's
// followers trail by an entry or a few).
const laggingBehind = 1000

// leaderlessLong is how long without a leader status calls more than an
// election under way (a few election timeouts, at the default 1 s).
const leaderlessLong = 15 * time.Second

// printStatus prints a Status answer as a table, saying what an operator
// would have to work out: no leader known by a member that is not in
// the configuration, and what only the leader knows.
func printStatus(stdout io.Writer, st *tenurev1.StatusResponse) error {
	tw := newTable(stdout)
	leader := "none known (an election may be under way; ask again shortly)"
	if since := st.GetNoLeaderSince(); since != nil {
		switch d := time.Since(since.AsTime()).Round(time.Second); {
		case d < leaderlessLong:
			leader = fmt.Sprintf("none known for %v (an election may be under way; ask again shortly)", d)
		default:
			leader = fmt.Sprintf("none known for %v: elections do not succeed, so the voters this member reaches are likely "+
				"not a majority (a lost quorum: bring members back; if they are gone for good, see --force-new-cluster in tenure server --help), "+
				"or this member was removed while it was down and has not heard of it (ask another member: if this one is not in its status, "+
				"stop it, or add it back with tenure cluster join)", d)
		}
	}
	switch {
	case st.GetLeaderId() != "":
		leader = st.GetLeaderId() + " (" + st.GetLeaderApiAddress() + ")"
		if c := st.GetLeaderLastContact(); c != nil {
			if d := time.Since(c.AsTime()); d >= staleContact {
				leader += fmt.Sprintf(", last heard from %v ago: it may have stopped or stepped down (an election follows if it stays silent)", d.Round(100*time.Millisecond))
			}
		}
	case !slices.ContainsFunc(st.GetMembers(), func(m *tenurev1.Member) bool { return m.GetId() == st.GetNodeId() }):
		leader = "none known: " + st.GetNodeId() + ", which answered, is not in the cluster's configuration (removed, or not yet added)"
	}
	answered := fmt.Sprintf("%s (version %s", st.GetNodeId(), st.GetVersion())
	if r := st.GetRules(); r != 0 {
		answered += fmt.Sprintf(", rules %d", r)
	}
	answered += ")"
	if s := st.GetStampedRules(); s != 0 && s < st.GetRules() {
		var unheard []string
		for _, m := range st.GetMembers() {
			if m.GetId() != st.GetNodeId() && m.GetAppliedIndex() == 0 {
				unheard = append(unheard, m.GetId())
			}
		}
		if len(unheard) > 0 {
			// Not heard from: counted as an older build until it answers.
			answered += fmt.Sprintf("; the cluster applies rules %d: %s did not answer the leader's asks for its rules "+
				"(down, or its API unreachable from the leader: check its --listen address and TLS between members, --tls-ca), "+
				"or a member runs an older build", s, strings.Join(unheard, ", "))
		} else {
			answered += fmt.Sprintf("; the cluster applies rules %d: a member runs an older build (upgrade it)", s)
		}
	}
	fmt.Fprintf(tw, "leader\t%s\nterm\t%d\ncommit index\t%d\napplied index\t%d\nlast log index\t%d (term %d)\nledger index\t%d\nanswered by\t%s\n\n",
		leader, st.GetTerm(), st.GetCommitIndex(), st.GetAppliedIndex(), st.GetLastLogIndex(), st.GetLastLogTerm(), st.GetLedgerIndex(), answered)
	fmt.Fprintln(tw, "ID\tROLE\tAPI ADDRESS\tRAFT ADDRESS\tAPPLIED")
	var notes []string
	if f := st.GetLogFailure(); f != "" {
		notes = append(notes, fmt.Sprintf("%s cannot write its Raft log: %s", st.GetNodeId(), f))
	}
	for _, m := range st.GetMembers() {
		role := enumName(m.GetRole().String(), "ROLE_")
		if r := m.GetRole(); r == tenurev1.Role_ROLE_UNKNOWN || r == tenurev1.Role_ROLE_UNSPECIFIED {
			role = "unknown (no leader known)"
		}
		if u := m.GetUnreachableSince(); u != nil {
			role += ", unreachable since " + fmtTime(u)
		}
		applied := ""
		if a := m.GetAppliedIndex(); a != 0 {
			applied = strconv.FormatUint(a, 10)
			if behind := st.GetCommitIndex() - min(a, st.GetCommitIndex()); behind > laggingBehind {
				applied += fmt.Sprintf(" (%d behind)", behind)
			}
		}
		if f := m.GetLogFailure(); f != "" {
			role += ", not replicating"
			if m.GetId() != st.GetNodeId() {
				notes = append(notes, fmt.Sprintf("%s cannot write its Raft log: %s", m.GetId(), f))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.GetId(), role, m.GetApiAddress(), m.GetRaftAddress(), applied)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(stdout, "\n"+n)
	}
	if st.GetLeaderId() != "" && st.GetLeaderId() != st.GetNodeId() {
		// Only the leader hears from every member.
		fmt.Fprintf(stdout, "\nanswered by a follower: which members are unreachable only the leader knows; ask it with --endpoints %s\n", st.GetLeaderApiAddress())
	}
	return nil
}
