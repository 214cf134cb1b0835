package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/fencing"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// Backups.
//
// A backup is the replicated state as one member holds it, encoded as a
// Raft snapshot of it is (statemachine.EncodeSnapshot), with a
// description (tenurev1.SnapshotInfo). Node.Backup takes one; the backup
// file (WriteBackup, ReadBackup) is the description and the state behind
// a magic line; RestoreDataDir makes from it the data dir of a new
// one-member cluster.

// backupMagic starts every backup file.
const backupMagic = "TENURE-BACKUP 1\n"

// backupMagicPrefix starts the magic line of every format of backup.
const backupMagicPrefix = "TENURE-BACKUP "

// DefaultFenceBump is how far RestoreDataDir raises the next fence by
// default: far more leases than any cluster issues between a backup and
// its restore, so that no fence the old cluster handed out after the
// backup is handed out again (fences are 64-bit).
const DefaultFenceBump = 1_000_000_000

// raisedFence is the next fence of a state recovered after grants may
// have been lost (a restore, a forced new cluster): next raised by bump,
// and at least now in microseconds since 1970. The floor keeps two
// recoveries from the same state apart (a backup restored twice, two old
// members each forced): the later one starts past every fence the earlier
// one issued meanwhile, unless that one issued more than a million a
// second or the clocks disagree by more than the time between them.
// Fences are 64-bit: the floor leaves room for half a million years.
func raisedFence(next, bump uint64, now time.Time) (uint64, error) {
	if next > ^uint64(0)-bump {
		return 0, fmt.Errorf("the next fence %d cannot be raised by %d", next, bump)
	}
	return max(next+bump, uint64(max(now.UnixMicro(), 0))), nil
}

// Backup captures the state for a backup: on the leader, everything
// committed when it is called (a linearizable read); on another member,
// what it has applied.
func (n *Node) Backup(ctx context.Context) (*tenurev1.SnapshotInfo, []byte, error) {
	leader := n.IsLeader()
	var (
		s     *logpb.Snapshot
		fill  func()
		info  *tenurev1.SnapshotInfo
		index uint64
	)
	err := n.Read(ctx, !leader, func(m *statemachine.Machine, _ registrar.Tick) error {
		if !m.Bootstrapped() {
			return &registrar.Error{Reason: registrar.ReasonNotBootstrapped, Message: "NOT_BOOTSTRAPPED: the registrar holds nothing yet"}
		}
		index = n.fsm.applied.Load()
		s, fill = m.CaptureLazy()
		info = &tenurev1.SnapshotInfo{KeyId: fencing.KeyID(m.PublicKey())}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	fill()
	b, err := statemachine.EncodeSnapshot(s)
	if err != nil {
		return nil, nil, err
	}
	sum := sha256.Sum256(b)
	info.NodeId, info.Leader, info.RaftIndex = n.id, leader, index
	info.Tick, info.RegistrarTime = s.Tick, timestamppb.New(time.UnixMilli(s.Wall).UTC())
	info.NextFence, info.NextLedgerIndex = s.NextSeq, s.NextIndex
	info.ActiveLeases = activeLeases(s)
	info.Size, info.Sha256 = uint64(len(b)), sum[:]
	info.TakenAt = timestamppb.Now()
	return info, b, nil
}

func activeLeases(s *logpb.Snapshot) uint64 {
	var n uint64
	for _, l := range s.Leases {
		if l.State == tenurev1.State_STATE_ACTIVE && l.ExpiresTick > s.Tick {
			n++
		}
	}
	return n
}

// WriteBackup writes a backup file: the magic line, the description's
// length (uvarint) and bytes, then the state.
func WriteBackup(w io.Writer, info *tenurev1.SnapshotInfo, data []byte) error {
	ib, err := proto.Marshal(info)
	if err != nil {
		return err
	}
	b := binary.AppendUvarint([]byte(backupMagic), uint64(len(ib)))
	b = append(b, ib...)
	if _, err := w.Write(b); err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

// maxBackupInfo bounds the description a backup file may claim.
const maxBackupInfo = 1 << 20

// ReadBackup reads a backup file and checks it: its size and SHA-256 are
// those the description gives, and the state decodes.
func ReadBackup(r io.Reader) (*tenurev1.SnapshotInfo, []byte, error) {
	br := bufio.NewReader(r)
	magic := make([]byte, len(backupMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != backupMagic {
		// A backup of another format (a newer tenure's) is named as such,
		// not as something else: what to do about it differs.
		if line, _, _ := bytes.Cut(magic, []byte("\n")); bytes.HasPrefix(line, []byte(backupMagicPrefix)) {
			return nil, nil, fmt.Errorf("a Tenure backup of format %q, which this tenure (format %q) cannot read: use the tenure version that wrote it, or a newer one",
				bytes.TrimPrefix(line, []byte(backupMagicPrefix)), strings.TrimSpace(strings.TrimPrefix(backupMagic, backupMagicPrefix)))
		}
		return nil, nil, errors.New("not a Tenure backup (tenure backup save writes them)")
	}
	n, err := binary.ReadUvarint(br)
	if err != nil || n > maxBackupInfo {
		return nil, nil, errors.New("damaged backup: bad description length")
	}
	ib := make([]byte, n)
	if _, err := io.ReadFull(br, ib); err != nil {
		return nil, nil, errors.New("damaged backup: the file ends inside its description (truncated?)")
	}
	info := &tenurev1.SnapshotInfo{}
	if err := proto.Unmarshal(ib, info); err != nil {
		return nil, nil, fmt.Errorf("damaged backup: description: %w", err)
	}
	data, err := io.ReadAll(br)
	if err != nil {
		return nil, nil, err
	}
	sum := sha256.Sum256(data)
	switch {
	case uint64(len(data)) != info.Size:
		return nil, nil, fmt.Errorf("damaged backup: %d bytes of state, the description says %d (truncated?)", len(data), info.Size)
	case !bytes.Equal(sum[:], info.Sha256):
		return nil, nil, errors.New("damaged backup: the state's SHA-256 is not the one the description gives")
	}
	m, err := statemachine.Restore(statemachine.DefaultConfig(), data)
	if err != nil {
		return nil, nil, fmt.Errorf("damaged backup: %w", err)
	}
	// What the description says of the state must be what the state
	// holds (the rest of it, who took it and when, only it knows).
	s := &logpb.Snapshot{}
	if err := proto.Unmarshal(data, s); err != nil {
		return nil, nil, fmt.Errorf("damaged backup: %w", err)
	}
	if info.Tick != s.Tick || info.NextFence != s.NextSeq || info.NextLedgerIndex != s.NextIndex ||
		info.ActiveLeases != activeLeases(s) || info.KeyId != fencing.KeyID(m.PublicKey()) {
		return nil, nil, errors.New("damaged backup: its description does not match the state it holds")
	}
	return info, data, nil
}

// RestoreDataDir makes dir the data dir of a new one-member cluster whose
// state is the backup's: a Raft snapshot of it under a configuration of
// member id alone at raftAddr. tenure server then starts on dir as on any data
// dir (with that node id and Raft address); other members join it. The
// next fence is raised by bumpFences (see DefaultFenceBump), and to at
// least the time of the restore in microseconds (raisedFence), unless
// bumpFences is 0; the rest of
// the state (leases, their fences and time left, queues, pools, policies,
// the registrar's key, the ledger's chain) is the backup's. dir must be
// empty or not exist. It returns the restored state's next fence.
func RestoreDataDir(dir, id, raftAddr string, data []byte, bumpFences uint64, log *slog.Logger) (nextFence uint64, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return 0, fmt.Errorf("cluster: restore: %s is not empty: restore into a new data dir", dir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("cluster: restore: %w", err)
	}
	if err := registrar.CheckIdentifier("node id", id, true); err != nil {
		return 0, err
	}
	if err := CheckRaftAddress("--raft-listen", raftAddr); err != nil {
		return 0, err
	}
	s := &logpb.Snapshot{}
	if err := proto.Unmarshal(data, s); err != nil {
		return 0, fmt.Errorf("cluster: restore: %w", err)
	}
	if bumpFences > 0 {
		if s.NextSeq, err = raisedFence(s.NextSeq, bumpFences, time.Now()); err != nil {
			return 0, fmt.Errorf("cluster: restore: %w", err)
		}
	}
	s.Members = nil // the backed-up cluster's: the new one publishes its own
	b, err := statemachine.EncodeSnapshot(s)
	if err != nil {
		return 0, err
	}
	if _, err := statemachine.Restore(statemachine.DefaultConfig(), b); err != nil {
		return 0, fmt.Errorf("cluster: restore: %w", err)
	}

	if err := privateDir(dir, log); err != nil {
		return 0, err
	}
	if _, err := nodeID(dir, id); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "snapshots"), 0o700); err != nil {
		return 0, fmt.Errorf("cluster: snapshot dir: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		return 0, fmt.Errorf("cluster: snapshot store: %w", err)
	}
	self := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(raftAddr)}}}
	_, trans := raft.NewInmemTransport(raft.ServerAddress(raftAddr)) // only encodes the peer list
	defer trans.Close()
	// The snapshot stands at index 1, term 1: the new cluster's log starts
	// after it, and its first election (term 1) is not behind it.
	sink, err := snaps.Create(1, 1, 1, self, 1, trans)
	if err != nil {
		return 0, fmt.Errorf("cluster: restore: %w", err)
	}
	if _, err := sink.Write(b); err != nil {
		_ = sink.Cancel()
		return 0, fmt.Errorf("cluster: restore: %w", err)
	}
	if err := sink.Close(); err != nil {
		return 0, fmt.Errorf("cluster: restore: %w", err)
	}
	log.Info("restored a backup into a new data dir", "dir", dir, "node", id, "raft_addr", raftAddr,
		"next_fence", s.NextSeq, "fence_bump", bumpFences)
	return s.NextSeq, nil
}
