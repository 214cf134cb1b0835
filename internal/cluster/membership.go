package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
)

// Membership changes and leadership transfers are checked against the
// leader's latest Raft configuration before Raft sees them. A request
// that cannot be done, or would break the cluster (a second address for a
// member, an address another member uses, removing the last voter), is a
// definite refusal: INVALID_ARGUMENT naming the field, nothing changed.
// OUTCOME_UNKNOWN is kept for a change Raft accepted and then could not
// confirm.

// AddVoter adds (or promotes) a voting member and publishes its API
// address (when given). Only the leader can; elsewhere it answers
// NOT_LEADER and changes nothing.
//
// A member already in the configuration with the same Raft address is
// left as it is (so a caller may retry after an unknown outcome); its API
// address is published when given and not published yet. A member with
// another Raft address is given this one (Raft's way to move a member; a
// member restarted elsewhere publishes itself so), unless the member
// still answers at its old address: then INVALID_ARGUMENT (field id).
// INVALID_ARGUMENT (field raft_address), with nothing changed: id is the
// leader itself with another address, another member has raftAddr, or
// raftAddr is a member's API address.
//
// A new voter is dialled first (under Raft TLS its certificate is checked
// too, and one that cannot be reached is refused). Without TLS one that
// does not answer may not listen yet, and is added unless it would count
// in a quorum this leader cannot gather: with the voters that answer its
// heartbeats it must still make a majority of the new configuration
// (adding a second voter to a lone one that way stops the cluster until
// the new one starts). force skips that check.
func (n *Node) AddVoter(ctx context.Context, id, raftAddr, apiAddr string, force bool) error {
	if !n.IsLeader() {
		return n.notLeader()
	}
	servers, err := n.configuration()
	if err != nil {
		return err
	}
	voter := false // id is a voter with this address already
	for _, s := range servers {
		switch {
		case string(s.ID) == id && !sameAddress(string(s.Address), raftAddr) && id == n.id:
			// The leader cannot move itself: it would stop hearing its own
			// configuration and lose the cluster.
			return invalidArg("raft_address", "member %s is this leader, at raft address %s; transfer the leadership before giving it another", id, s.Address)
		case string(s.ID) == id && !sameAddress(string(s.Address), raftAddr) && !n.unreachable(id):
			// A live member keeps its id: a second node started with it
			// (a copied --node-id) would take its place in the
			// configuration, and the two would move it back and forth.
			return invalidArg("id", "member %s is up at raft address %s (it answers this leader's heartbeats): start the new node with another --node-id, or stop %s and remove it first", id, s.Address, id)
		case string(s.ID) == id && !sameAddress(string(s.Address), raftAddr):
			// Raft's way to give a member a new address (a member
			// restarted elsewhere, whose old address no longer answers,
			// publishes itself so).
		case string(s.ID) == id:
			voter = s.Suffrage == raft.Voter
		case sameAddress(string(s.Address), raftAddr):
			return invalidArg("raft_address", "%s is already the raft address of member %s", raftAddr, s.ID)
		}
	}
	if owner := n.apiAddressOwner(raftAddr); owner != "" {
		return invalidArg("raft_address", "%s is the API address of member %s, not a raft address", raftAddr, owner)
	}
	if !voter {
		if n.stream.tls != nil && id != n.id {
			// Raft would add a voter it cannot reach, and count it in every
			// quorum from then on: check its certificate first.
			if err := n.stream.probe(raft.ServerAddress(raftAddr), 5*time.Second); err != nil {
				return err
			}
		} else if id != n.id && !force {
			if err := n.stream.probe(raft.ServerAddress(raftAddr), 2*time.Second); err != nil {
				if up, all, _ := n.votersUp(servers, id); up < (all+1)/2+1 { // id, at a new address, counted once
					return invalidArg("raft_address", "no member's Raft port answers at %s (%v), and with %s as a voter the cluster's %d voters would have %d that answer: "+
						"not a majority, so it would stop taking writes until %s answers there. Start it first (tenure server --join adds it once it listens), "+
						"check that %s is its --raft-listen (not its API address), or add it anyway with force (tenure cluster join --force)",
						raftAddr, registrar.ToError(err).Message, id, all+1, up, id, raftAddr)
				}
			}
		}
		if err := n.membership(n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, n.cfg.ApplyTimeout)); err != nil {
			return err
		}
		n.log.Info("added a voter", "member", id, "raft_address", raftAddr, "api_address", apiAddr)
	}
	if apiAddr == "" {
		return nil
	}
	n.fsm.mu.RLock()
	m, ok := n.fsm.m.Member(id)
	n.fsm.mu.RUnlock()
	if ok && m.APIAddress == apiAddr && m.RaftAddress == raftAddr {
		return nil
	}
	return n.proposeMember(ctx, &logpb.SetMember{Id: id, ApiAddress: apiAddr, RaftAddress: raftAddr})
}

// RemoveServer removes a member from the Raft configuration, then from
// the published members. When that second step cannot be done (a leader
// that removed itself), the next leader does it when it takes office.
//
// An id that is not in the configuration is already removed: it succeeds
// without a Raft change (so a caller may retry after an unknown outcome),
// finishing the unpublishing if a removal left the member published.
// Removing the only voter is INVALID_ARGUMENT (field id), nothing changed;
// so is removing a voter when the voters left that answer this leader's
// heartbeats would not be a majority of them (the cluster would stop
// taking writes until the others are back), unless force. wasMember says
// whether id was in the configuration, or still published, when called.
func (n *Node) RemoveServer(ctx context.Context, id string, force bool) (wasMember bool, err error) {
	if !n.IsLeader() {
		return false, n.notLeader()
	}
	found, voter, err := n.checkRemoval(id, force)
	if err != nil {
		return false, err
	}
	if found {
		if voter && id != n.id {
			// A voter is demoted first, and removed once that is
			// committed. Raft stops replicating to a member as it removes
			// it, with one last try that it skips while a call to the
			// member is under way; the demotion is replicated to it as
			// ever, so the member hears at least that it no longer votes
			// (without it, a member removed under writes often never
			// learnt it was out: it kept calling elections nobody
			// answered and said an election was under way).
			demoted := n.raft.DemoteVoter(raft.ServerID(id), 0, n.cfg.ApplyTimeout)
			if err := n.membership(demoted); err != nil {
				return false, err
			}
			n.awaitAck(ctx, id, demoted.Index())
		}
		if err := n.membership(n.raft.RemoveServer(raft.ServerID(id), 0, n.cfg.ApplyTimeout)); err != nil {
			return false, err
		}
		n.log.Info("removed a member", "member", id)
	} else {
		n.fsm.mu.RLock()
		_, published := n.fsm.m.Member(id)
		n.fsm.mu.RUnlock()
		if !published {
			return false, nil
		}
	}
	if err := n.proposeMember(ctx, &logpb.SetMember{Id: id, Removed: true}); err != nil {
		n.log.Warn("removed member not yet unpublished; the next leader will", "member", id, "err", err)
	}
	return true, nil
}

// ackWait bounds how long RemoveServer waits for a demoted member to
// acknowledge its demotion before removing it.
const ackWait = 2 * time.Second

// awaitAck waits, within ackWait, until member id has acknowledged
// holding the log up to index; not for a member this leader cannot reach.
// The demotion commits without the member when the other voters have it,
// and a call to the member under way as it commits may carry older
// entries only.
func (n *Node) awaitAck(ctx context.Context, id string, index uint64) {
	deadline := time.Now().Add(ackWait)
	for n.calls.ackedBy(raft.ServerID(id)) < index && !n.unreachable(id) && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return
		case <-n.stop:
			return
		case <-time.After(2 * time.Millisecond): // acknowledgements are not broadcast
		}
	}
}

// CheckRemoval is RemoveServer's refusals, changing nothing: a leader
// removing itself asks before it hands its leadership over.
func (n *Node) CheckRemoval(id string, force bool) error {
	_, _, err := n.checkRemoval(id, force)
	return err
}

// checkRemoval reports whether id is in the configuration and whether it
// votes, or why it may not be removed.
func (n *Node) checkRemoval(id string, force bool) (found, voter bool, err error) {
	servers, err := n.configuration()
	if err != nil {
		return false, false, err
	}
	for _, s := range servers {
		if string(s.ID) != id {
			continue
		}
		found = true
		if s.Suffrage != raft.Voter {
			continue
		}
		voter = true
		if !otherVoter(servers, id) {
			return true, true, invalidArg("id", "%s is the only voter and a cluster needs one; add another voter before removing it", id)
		}
		if force {
			continue
		}
		if up, all, down := n.votersUp(servers, id); up < all/2+1 {
			return true, true, invalidArg("id", "removing %s leaves %d voters, of which %d answer this leader (%s cannot be reached): not a majority, "+
				"so the cluster would stop taking writes until they are back. Bring them back, or remove them first, "+
				"or remove %s anyway with force (tenure cluster remove --force)", id, all, up, strings.Join(down, ", "), id)
		}
	}
	return found, voter, nil
}

// unreachable reports whether this leader cannot reach member id: its
// heartbeats fail, or the member has answered none for a while.
func (n *Node) unreachable(id string) bool {
	_, ok := n.unreachableSince(id)
	return ok
}

// votersUp counts the voters of servers but without, and of them those
// this leader hears from: itself and the voters it can reach whose Raft
// port answers a probe now (a member that just hung, stopped or cut off
// by dropped packets, is called unreachable only after silentAfter).
// down names the others.
func (n *Node) votersUp(servers []raft.Server, without string) (up, all int, down []string) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, s := range servers {
		if s.Suffrage != raft.Voter || string(s.ID) == without {
			continue
		}
		all++
		switch {
		case string(s.ID) == n.id:
			mu.Lock() // the probes below count under it as they finish
			up++
			mu.Unlock()
		case n.unreachable(string(s.ID)):
			mu.Lock()
			down = append(down, string(s.ID))
			mu.Unlock()
		default:
			wg.Go(func() {
				err := n.stream.probe(s.Address, voterProbeTimeout)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					down = append(down, string(s.ID))
				} else {
					up++
				}
			})
		}
	}
	wg.Wait()
	slices.Sort(down)
	return up, all, down
}

// voterProbeTimeout bounds the probe of a voter's Raft port before a
// membership change.
const voterProbeTimeout = time.Second

// otherVoter reports whether a voter other than id is in servers.
func otherVoter(servers []raft.Server, id string) bool {
	for _, s := range servers {
		if s.Suffrage == raft.Voter && string(s.ID) != id {
			return true
		}
	}
	return false
}

// TransferLeadership asks Raft to hand leadership to id ("" lets Raft
// pick a voter). Only the leader can; elsewhere it answers NOT_LEADER.
// Naming this node (it leads already) succeeds without a change.
// INVALID_ARGUMENT (field id), nothing changed: id is not a member or not
// a voter, or id is "" and no other voter exists.
func (n *Node) TransferLeadership(id string) error {
	if !n.IsLeader() {
		return n.notLeader()
	}
	servers, err := n.configuration()
	if err != nil {
		return err
	}
	var target *raft.Server
	for i, s := range servers {
		if string(s.ID) == id {
			target = &servers[i]
		}
	}
	var f raft.Future
	switch {
	case id == "" && !otherVoter(servers, n.id):
		return invalidArg("id", "there is no other voter to hand leadership to (%s is the only one)", n.id)
	case id == "":
		f = n.raft.LeadershipTransfer()
	case target == nil:
		return invalidArg("id", "%q is not a member", id)
	case id == n.id:
		return nil
	case target.Suffrage != raft.Voter:
		return invalidArg("id", "%s is not a voter and cannot lead", id)
	case n.unreachable(id):
		// Raft would try for an election timeout, refusing writes
		// meanwhile, and then give up.
		since, _ := n.unreachableSince(id)
		return invalidArg("id", "%s cannot be reached (no heartbeat answered since %s): hand leadership to a member that is up", id, since.UTC().Format(time.RFC3339))
	default:
		f = n.raft.LeadershipTransferToServer(target.ID, target.Address)
	}
	if err := f.Error(); err != nil {
		if r := raftRefusal(err); r != nil {
			return r
		}
		if strings.Contains(err.Error(), "leadership transfer timeout") {
			if id == "" {
				id = "the most up-to-date other voter"
			}
			meta := n.leaderMeta()
			meta["cause"] = "transfer_timeout"
			return &registrar.Error{Reason: registrar.ReasonOutcomeUnknown, Metadata: meta,
				Message: string(registrar.ReasonOutcomeUnknown) + ": " + id + " did not take leadership over within an election timeout " +
					"(paused, overloaded or cut off?); this member leads on, but the target may still start an election when it " +
					"gets to the request: see tenure cluster status"}
		}
		return n.raftError(err)
	}
	if id == "" {
		id = "the most up-to-date other voter" // Raft's pick
	}
	n.log.Info("handed leadership over", "to", id)
	return nil
}

// NextLeader waits until this member knows a leader other than itself —
// the one a transfer handed over to — and returns its id, or "" when none
// is known within the apply timeout or before ctx ends. Right after a
// transfer the old leader has stepped down and has not heard from the new
// one yet.
func (n *Node) NextLeader(ctx context.Context) string {
	deadline := time.NewTimer(n.cfg.ApplyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, id := n.raft.LeaderWithID(); id != "" && string(id) != n.id {
			return string(id)
		}
		select {
		case <-ctx.Done():
			return ""
		case <-deadline.C:
			return ""
		case <-tick.C:
		}
	}
}

// configuration returns the latest Raft configuration's servers (on the
// leader, the one the next change applies to).
func (n *Node) configuration() ([]raft.Server, error) {
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return nil, unavailable("reading the raft configuration: " + err.Error())
	}
	return cf.Configuration().Servers, nil
}

// apiAddressOwner returns the id of the member whose API address is addr
// (this node's, or a published one), or "".
func (n *Node) apiAddressOwner(addr string) string {
	if sameAddress(n.cfg.APIAddr, addr) {
		return n.id
	}
	for _, m := range n.Members() {
		if sameAddress(m.APIAddress, addr) {
			return m.ID
		}
	}
	return ""
}

func (n *Node) membership(f raft.IndexFuture) error {
	err := f.Error()
	n.noteVoters()
	if err != nil {
		if r := raftRefusal(err); r != nil {
			return r
		}
		return n.raftError(err)
	}
	return nil
}

// noteVoters tells the proposer whether other voters share the log
// (entrySlots.atWrite); the leader calls it on taking office and after
// each membership change it makes.
func (n *Node) noteVoters() {
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return
	}
	voters := 0
	for _, srv := range cf.Configuration().Servers {
		if srv.Suffrage == raft.Voter {
			voters++
		}
	}
	n.slots.atWrite.Store(voters > 1)
}

// raftRefusals are the errors with which Raft refuses a membership change
// (configuration.go checkConfiguration, before anything is appended) or a
// leadership transfer (raft.go leaderLoop, before anything is sent), with
// the request field each one is about. Raft makes them with fmt.Errorf,
// not as sentinel values, so their text is the only way to tell them
// apart; TestRaftRefusalsMatchRaft pins them to the Raft version in
// go.mod. The checks above catch these cases first; this is for a change
// racing with another one.
var raftRefusals = []struct{ prefix, field string }{
	{"found duplicate ID in configuration", "id"},
	{"found duplicate address in configuration", "raft_address"},
	{"empty ID in configuration", "id"},
	{"empty address in configuration", "raft_address"},
	{"need at least one voter in configuration", "id"},
	{"cannot find peer", "id"},
	{"cannot find replication state for", "id"},
}

// raftRefusal turns a Raft refusal (see raftRefusals) into
// INVALID_ARGUMENT, or returns nil for any other error.
func raftRefusal(err error) error {
	for _, r := range raftRefusals {
		if strings.HasPrefix(err.Error(), r.prefix) {
			return invalidArg(r.field, "raft refused it and nothing changed: %v", err)
		}
	}
	return nil
}

// invalidArg is INVALID_ARGUMENT naming field (API.md "Errors").
func invalidArg(field, format string, args ...any) error {
	return &registrar.Error{Reason: registrar.ReasonInvalidArgument,
		Message:  fmt.Sprintf("%s: %s: ", registrar.ReasonInvalidArgument, field) + fmt.Sprintf(format, args...),
		Metadata: map[string]string{"field": field}}
}

// CheckAddress validates a member address as INVALID_ARGUMENT naming
// field: host:port with a non-empty host that is an IP address or a DNS
// host name, and a numeric port from 1 to 65535. It does not dial: a
// member being added may not listen yet.
func CheckAddress(field, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		why := err.Error()
		var ae *net.AddrError
		if errors.As(err, &ae) {
			why = ae.Err
		}
		return invalidArg(field, "%q is not host:port (%s)", addr, why)
	}
	if host == "" {
		return invalidArg(field, "%q has no host", addr)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return invalidArg(field, "%q: the port must be a number from 1 to 65535", addr)
	}
	if _, err := netip.ParseAddr(host); err != nil && !hostName(host) {
		return invalidArg(field, "%q: %q is neither an IP address nor a host name", addr, host)
	}
	return nil
}

// CheckRaftAddress is CheckAddress for a member's Raft address, which the
// other members dial: an unspecified IP (0.0.0.0, ::) is refused too.
func CheckRaftAddress(field, addr string) error {
	if err := CheckAddress(field, addr); err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(addr)
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		return invalidArg(field, "%q: %s is the unspecified address; give one the other members can dial", addr, host)
	}
	return nil
}

// hostName reports whether h is a DNS host name: dot-separated labels of
// 1 to 63 letters, digits, hyphens (not at either end) or underscores, at
// most 253 bytes, a trailing dot allowed, the last label not all digits
// (that would be a malformed IP address).
func hostName(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return strings.Trim(labels[len(labels)-1], "0123456789") != ""
}

// sameAddress reports whether two host:port addresses name the same
// endpoint as written: equal ports, and equal IPs or host names (case and
// a trailing dot aside). Names are not resolved.
func sameAddress(a, b string) bool {
	if a == b {
		return true
	}
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil {
		return false
	}
	na, errA := strconv.ParseUint(pa, 10, 16)
	nb, errB := strconv.ParseUint(pb, 10, 16)
	if errA != nil || errB != nil || na != nb {
		return false
	}
	ia, errA := netip.ParseAddr(ha)
	ib, errB := netip.ParseAddr(hb)
	if errA == nil || errB == nil {
		return errA == nil && errB == nil && ia.Unmap() == ib.Unmap()
	}
	return strings.EqualFold(strings.TrimSuffix(ha, "."), strings.TrimSuffix(hb, "."))
}
