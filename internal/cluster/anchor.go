package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"os"
	"path/filepath"
	"sort"

	"google.golang.org/protobuf/proto"

	"github.com/tenurehq/tenure/internal/ledger"
	"github.com/tenurehq/tenure/internal/logpb"
)

// SnapshotAnchor reads, offline and without writing anything, the ledger
// chain head recorded in the newest Raft snapshot of a data dir: the
// durable ledger must reach that point with that hash (the node fsyncs
// the ledger before each snapshot), which tenure audit verify checks. It
// returns nil without error when the data dir has no snapshot.
func SnapshotAnchor(dataDir string) (*ledger.Anchor, error) {
	dir := filepath.Join(dataDir, "snapshots") // raft.FileSnapshotStore's layout
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	type meta struct {
		ID          string
		Index, Term uint64
		CRC         []byte
	}
	var metas []meta
	for _, e := range ents {
		if !e.IsDir() || filepath.Ext(e.Name()) == ".tmp" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "meta.json"))
		if err != nil {
			continue // an unfinished snapshot; Raft skips it too
		}
		var m meta
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("snapshot %s: meta.json: %w", e.Name(), err)
		}
		m.ID = e.Name()
		metas = append(metas, m)
	}
	if len(metas) == 0 {
		return nil, nil
	}
	sort.Slice(metas, func(i, j int) bool {
		a, b := metas[i], metas[j]
		if a.Term != b.Term {
			return a.Term > b.Term
		}
		if a.Index != b.Index {
			return a.Index > b.Index
		}
		return a.ID > b.ID
	})
	m := metas[0]
	state, err := os.ReadFile(filepath.Join(dir, m.ID, "state.bin"))
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", m.ID, err)
	}
	h := crc64.New(crc64.MakeTable(crc64.ECMA))
	h.Write(state)
	if !bytes.Equal(h.Sum(nil), m.CRC) {
		return nil, fmt.Errorf("snapshot %s: state.bin fails its checksum", m.ID)
	}
	var s logpb.Snapshot
	if err := proto.Unmarshal(state, &s); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", m.ID, err)
	}
	if s.NextIndex == 0 || len(s.ChainHead) != len(ledger.Hash{}) {
		return nil, fmt.Errorf("snapshot %s: no ledger chain head in it", m.ID)
	}
	a := &ledger.Anchor{Next: s.NextIndex, Source: "raft snapshot " + m.ID}
	copy(a.Head[:], s.ChainHead)
	return a, nil
}
