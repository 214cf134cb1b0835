package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/registrar"
)

// A backup of a running node, written and read back, restored into a new
// data dir: a node started there leads alone with the backup's leases,
// their fences, and fences above the bump for new grants.
func TestBackupRestore(t *testing.T) {
	n := open(t, t.TempDir())
	defer n.Close()
	kept := acquire(t, n, "kept", "h1", time.Minute, 0).Lease
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, data, err := n.Backup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Leader || info.ActiveLeases != 1 || info.NextFence != kept.Fence+1 || info.NodeId != n.ID() || info.Size != uint64(len(data)) {
		t.Fatalf("backup info: %v (kept fence %d)", info, kept.Fence)
	}
	acquire(t, n, "after-backup", "h1", time.Minute, 0) // not in the backup

	var file bytes.Buffer
	if err := WriteBackup(&file, info, data); err != nil {
		t.Fatal(err)
	}
	raw := file.Bytes()
	gotInfo, gotData, err := ReadBackup(bytes.NewReader(raw))
	if err != nil || !bytes.Equal(gotData, data) || gotInfo.RaftIndex != info.RaftIndex {
		t.Fatalf("ReadBackup: %v, %d bytes", err, len(gotData))
	}
	flipped := bytes.Clone(raw)
	flipped[len(flipped)-3] ^= 0xff
	lying := proto.Clone(info).(*tenurev1.SnapshotInfo)
	lying.NextFence += 100 // the state is untouched: its checksum holds
	var lie bytes.Buffer
	if err := WriteBackup(&lie, lying, data); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]byte{
		"description that lies": lie.Bytes(),
		"truncated":             raw[:len(raw)-10],
		"flipped":               flipped,
		"not one":               []byte("hello"),
		"description":           raw[:len(backupMagic)+3],
	} {
		if _, _, err := ReadBackup(bytes.NewReader(bad)); err == nil {
			t.Errorf("ReadBackup of a %s file succeeded", name)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "restored")
	const bump = 1000
	restoredAt := uint64(time.Now().UnixMicro())
	next, err := RestoreDataDir(dir, "n9", ln.Addr().String(), gotData, bump, nil)
	if err != nil || next < restoredAt || next <= kept.Fence+bump {
		t.Fatalf("restore: next fence %d, %v", next, err)
	}
	if _, err := RestoreDataDir(dir, "n9", ln.Addr().String(), gotData, bump, nil); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("a second restore into the same dir: %v", err)
	}
	r := openWith(t, dir, func(c *Config) { c.NodeID, c.RaftListener = "n9", ln })
	defer r.Close()
	if got, err := get(t, r, kept.ID); err != nil || got.State != registrar.Active || got.Fence != kept.Fence {
		t.Fatalf("the backed-up lease after the restore: %+v %v", got, err)
	}
	// The next fence is past the bump, and past the time of the restore
	// in microseconds: a second restore of the same backup, later, starts
	// past what this one issues meanwhile.
	after := acquire(t, r, "after-backup", "h2", time.Minute, 0)
	if after.Err != nil || after.Lease.Fence <= kept.Fence+bump || after.Lease.Fence < restoredAt {
		t.Fatalf("a grant after the restore: %+v, want a fence past %d and %d", after, kept.Fence+bump, restoredAt)
	}
	again := filepath.Join(t.TempDir(), "again")
	if _, err := RestoreDataDir(again, "n9", "127.0.0.1:1", gotData, bump, nil); err != nil {
		t.Fatal(err)
	}
	m, err := restoredState(t, again)
	if err != nil || m.NextSeq <= after.Lease.Fence {
		t.Fatalf("the same backup restored again starts at fence %d (%v); the first restore issued %d", m.NextSeq, err, after.Lease.Fence)
	}
	// The old members, published in the backup, are dropped once the new
	// leader takes office.
	waitUntil(t, "the restored cluster to publish only its member", func() bool {
		m := r.Members()
		return len(m) == 1 && m[0].ID == "n9"
	})
}

func TestRestoreRefuses(t *testing.T) {
	dir := t.TempDir()
	for name, f := range map[string]func() error{
		"bad node id": func() error {
			return restoreErr(RestoreDataDir(filepath.Join(dir, "a"), "", "127.0.0.1:1", nil, 0, nil))
		},
		"bad raft address": func() error { return restoreErr(RestoreDataDir(filepath.Join(dir, "b"), "n1", "nohost", nil, 0, nil)) },
		"unspecified raft address": func() error {
			return restoreErr(RestoreDataDir(filepath.Join(dir, "d"), "n1", "0.0.0.0:7071", nil, 0, nil))
		},
		"bad state": func() error {
			return restoreErr(RestoreDataDir(filepath.Join(dir, "c"), "n1", "127.0.0.1:1", []byte("junk"), 0, nil))
		},
	} {
		if err := f(); err == nil {
			t.Errorf("%s: restored", name)
		}
	}
}

// restoredState reads the state RestoreDataDir left in dir's snapshot.
func restoredState(t *testing.T, dir string) (*logpb.Snapshot, error) {
	t.Helper()
	snaps, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		return nil, err
	}
	list, err := snaps.List()
	if err != nil || len(list) != 1 {
		return nil, fmt.Errorf("snapshots %v: %v", list, err)
	}
	_, rc, err := snaps.Open(list[0].ID)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, err
	}
	s := &logpb.Snapshot{}
	return s, proto.Unmarshal(b, s)
}

func restoreErr(_ uint64, err error) error { return err }

// A backup of another format is named as one, not as "not a Tenure backup":
// the operator needs the tenure that wrote it, not another file.
func TestReadBackupOtherFormat(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"TENURE-BACKUP 2\n\x05hello", `format "2"`},
		{"TENURE-BACKUP 10\n\x05hello", `format "10"`},
		{"hello", "not a Tenure backup"},
		{"", "not a Tenure backup"},
	} {
		_, _, err := ReadBackup(strings.NewReader(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ReadBackup(%q) = %v, want an error saying %s", tc.file, err, tc.want)
		}
	}
}
