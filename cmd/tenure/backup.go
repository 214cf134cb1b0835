package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	tenure "github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/internal/cluster"
	"github.com/tenurehq/tenure/internal/ledger"
)

const backupHelp = `Back up a cluster's state to a file, and restore one into a new cluster.

  save FILE      asks the leader (found through --endpoints) for the whole
                 replicated state and writes it to FILE (mode 0600): every
                 lease, waiter, guarded state, queue and pool, the policies,
                 the ledger's chain head and the registrar's signing key: all
                 that was committed when asked. With --stale, the first
                 member that answers, leader or not, gives the state it has
                 applied (a cluster without a leader). Admin of every
                 namespace only. Keep backups as secret as a data dir: they
                 hold the key that signs certificates and checkpoints.
  inspect FILE   checks FILE (its SHA-256, that the state decodes, that
                 the description matches the state) and says what it holds.
  restore FILE   offline: makes --data-dir (empty or new) the data dir of a
                 one-member cluster of --node-id at --raft-listen whose state
                 is FILE's. Start "tenure server" on it with the same
                 --node-id and --raft-listen; other members --join it. The
                 next fence is raised by --bump-fences (default one billion),
                 so that fences the old cluster issued after the backup are
                 never issued again, and to at least the time of the restore
                 in microseconds, so that restoring the same backup again
                 later starts past every fence the first restore issued;
                 leases keep the time left they had.`

const backupExamples = `  tenure backup save tenure-$(date +%F).backup --endpoints 10.0.0.1:7070,10.0.0.2:7070
  tenure backup inspect tenure-2026-11-27.backup
  tenure backup restore tenure-2026-11-27.backup --data-dir ./restored --node-id n1 --raft-listen 127.0.0.1:7071
  tenure server --data-dir ./restored --node-id n1 --raft-listen 127.0.0.1:7071`

// runBackup is `tenure backup save|inspect|restore`.
func runBackup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCLICommand("tenure backup", "save|inspect|restore FILE [flags]", backupHelp, backupExamples, stdout, stderr)
	dataDir := c.fs.String("data-dir", "", "restore: the new data dir (empty or not existing)")
	nodeID := c.fs.String("node-id", "node1", "restore: the member id of the restored cluster's first member")
	raftListen := c.fs.String("raft-listen", "127.0.0.1:7071", "restore: that member's Raft address (its tenure server --raft-listen)")
	bump := c.fs.Uint64("bump-fences", cluster.DefaultFenceBump, "restore: raise the next fence by this much, and to at least the restore's time in µs (0 keeps the backup's)")
	pos, err := c.parse(args, 2, 2)
	if err != nil {
		return err
	}
	file := pos[1]
	switch pos[0] {
	case "save":
		return backupSave(ctx, c, file, c.stale)
	case "inspect":
		info, data, err := readBackupFile(file)
		if err != nil {
			return err
		}
		return printBackupInfo(c, file, info, len(data))
	case "restore":
		if *dataDir == "" {
			return c.usageError("restore needs --data-dir: the new member's data dir")
		}
		info, data, err := readBackupFile(file)
		if err != nil {
			return err
		}
		next, err := cluster.RestoreDataDir(*dataDir, *nodeID, *raftListen, data, *bump, nil)
		if err != nil {
			if strings.HasPrefix(err.Error(), "INVALID_ARGUMENT") {
				return err
			}
			return fmt.Errorf("INVALID_ARGUMENT: %v", err)
		}
		if c.json() {
			return writeJSON(stdout, info)
		}
		fmt.Fprintf(stdout, "restored %s (taken from %s at raft index %d, %s) into %s\n",
			file, info.GetNodeId(), info.GetRaftIndex(), info.GetTakenAt().AsTime().Format(time.RFC3339), *dataDir)
		fmt.Fprintf(stdout, "next fence %d (the backup's %d raised by at least %d); start it with (and --listen for its API address, 127.0.0.1:7070 unless given):\n"+
			"  tenure server --data-dir %s --node-id %s --raft-listen %s\n",
			next, info.GetNextFence(), *bump, *dataDir, *nodeID, *raftListen)
		return nil
	}
	return c.usageError("%s", unknownSubcommand(pos[0], "save", "inspect", "restore"))
}

// backupSave streams a backup from the leader (any member that answers,
// the leader first, when stale) into file (whole or not at all:
// ledger.WriteFileAtomic). The leader is asked of each member in turn
// until one names it (a removed or cut-off member knows none), and asked
// even when --endpoints does not list it.
func backupSave(ctx context.Context, c *cliCommand, file string, stale bool) error {
	if fi, err := os.Stat(file); err == nil && fi.IsDir() {
		return fmt.Errorf("INVALID_ARGUMENT: %s is a directory: name the backup file", file)
	}
	if fi, err := os.Stat(filepath.Dir(file)); err != nil || !fi.IsDir() {
		return fmt.Errorf("INVALID_ARGUMENT: %s: no directory %s to write it in", file, filepath.Dir(file))
	}
	r, err := c.remote()
	if err != nil {
		return err
	}
	for _, cl := range r.clusters {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second) // a hung member
		st, err := cl.Status(sctx, connect.NewRequest(&tenurev1.StatusRequest{}))
		cancel()
		if err != nil {
			continue
		}
		if leader := st.Msg.GetLeaderApiAddress(); leader != "" {
			eps := c.endpointList()
			list := leaderFirst(eps, leader)
			if !slices.ContainsFunc(eps, func(e string) bool { return endpointAddr(e) == leader }) {
				list = leader + "," + list
			}
			c.pinEndpoints(list)
			if r, err = c.remote(); err != nil {
				return err
			}
			break
		}
	}
	var (
		info *tenurev1.SnapshotInfo
		data bytes.Buffer
	)
	err = r.cluster(func(cl tenurev1connect.ClusterServiceClient) error {
		info = nil
		data.Reset()
		stream, err := cl.SaveSnapshot(ctx, connect.NewRequest(&tenurev1.SaveSnapshotRequest{AllowStale: stale}))
		if err != nil {
			return err
		}
		defer stream.Close()
		for stream.Receive() {
			m := stream.Msg()
			if m.GetInfo() != nil {
				info = m.GetInfo()
			}
			data.Write(m.GetData())
		}
		if err := stream.Err(); err != nil {
			if ctx.Err() == nil && tenure.ReasonOf(tenure.ParseError(err)) == "" {
				return readRetry{err} // the member hung or went away: a read, so the next one
			}
			return err
		}
		if info == nil {
			return errors.New("OUTCOME_UNKNOWN: the member sent no backup")
		}
		return nil
	})
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := cluster.WriteBackup(&out, info, data.Bytes()); err != nil {
		return err
	}
	if _, _, err := cluster.ReadBackup(bytes.NewReader(out.Bytes())); err != nil { // what is written reads back whole
		return fmt.Errorf("OUTCOME_UNKNOWN: the backup received does not check: %v", err)
	}
	if err := ledger.WriteFileAtomic(file, out.Bytes()); err != nil {
		return fmt.Errorf("INVALID_ARGUMENT: %s: %v", file, strings.TrimPrefix(err.Error(), "ledger: "))
	}
	return printBackupInfo(c, file, info, data.Len())
}

// readBackupFile reads and checks a backup file; a bad one is
// INVALID_ARGUMENT.
func readBackupFile(file string) (*tenurev1.SnapshotInfo, []byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, nil, fmt.Errorf("INVALID_ARGUMENT: %v", err)
	}
	defer f.Close()
	info, data, err := cluster.ReadBackup(f)
	if err != nil {
		return nil, nil, fmt.Errorf("INVALID_ARGUMENT: %s: %v", file, err)
	}
	return info, data, nil
}

func printBackupInfo(c *cliCommand, file string, info *tenurev1.SnapshotInfo, size int) error {
	if c.json() {
		return writeJSON(c.stdout, info)
	}
	from := info.GetNodeId() + " (follower: what it had applied)"
	if info.GetLeader() {
		from = info.GetNodeId() + " (leader)"
	}
	tw := newTable(c.stdout)
	fmt.Fprintf(tw, "file\t%s\n", file)
	fmt.Fprintf(tw, "taken from\t%s\n", from)
	fmt.Fprintf(tw, "taken at\t%s\n", info.GetTakenAt().AsTime().Format(time.RFC3339))
	fmt.Fprintf(tw, "raft index\t%d\n", info.GetRaftIndex())
	fmt.Fprintf(tw, "registrar time\t%s (tick %d)\n", info.GetRegistrarTime().AsTime().Format(time.RFC3339), info.GetTick())
	fmt.Fprintf(tw, "active leases\t%d\n", info.GetActiveLeases())
	fmt.Fprintf(tw, "next fence\t%d\n", info.GetNextFence())
	fmt.Fprintf(tw, "next ledger index\t%d\n", info.GetNextLedgerIndex())
	fmt.Fprintf(tw, "key id\t%s\n", info.GetKeyId())
	fmt.Fprintf(tw, "size\t%d bytes\n", size)
	fmt.Fprintf(tw, "sha256\t%s\n", hex.EncodeToString(info.GetSha256()))
	return tw.Flush()
}
