package fault

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// ArtifactsDir returns a fresh directory for a failed test's artifacts:
// under $TENURE_ARTIFACTS when set, else under the system temp dir (not
// t.TempDir, which the test removes).
func ArtifactsDir(t testing.TB) string {
	root := os.Getenv("TENURE_ARTIFACTS")
	if root == "" {
		root = filepath.Join(os.TempDir(), "tenure-fault-artifacts")
	}
	name := regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(t.Name(), "_")
	dir := filepath.Join(root, fmt.Sprintf("%s-%s", name, time.Now().UTC().Format("20060102T150405.000")))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("cannot create artifacts dir: %v", err)
	}
	return dir
}

// Report is the outcome of checking one history.
type Report struct {
	Ops          int // operations recorded
	Checked      int // operations given to porcupine (effects possible)
	Unknown      int // operations of unknown outcome
	Linearizable porcupine.CheckResult
	Violations   []string // direct checks
	info         porcupine.LinearizationInfo
}

// Check checks a history: porcupine against Model (per resource), plus
// extra violations found by the caller's direct checks. On any failure it
// writes the history, porcupine's visualisation and the cluster's logs
// to an artifacts directory, names it in the test output, and fails t.
// With TENURE_FAULT_KEEP set it writes them for a passing run too.
func Check(t testing.TB, rec *Recorder, c *Cluster, timeout time.Duration, extra ...string) Report {
	t.Helper()
	ops := rec.Ops()
	r := Report{Ops: len(ops)}
	for _, o := range ops {
		if o.Outcome == Unknown {
			r.Unknown++
		}
	}
	pops := Operations(ops)
	r.Checked = len(pops)
	r.Linearizable, r.info = porcupine.CheckOperationsVerbose(Model(), pops, timeout)
	r.Violations = append(CheckGrants(ops), extra...)
	if r.Linearizable == porcupine.Ok && len(r.Violations) == 0 {
		if os.Getenv("TENURE_FAULT_KEEP") != "" {
			dir := ArtifactsDir(t)
			WriteArtifacts(t, dir, rec, c, &r)
			t.Logf("TENURE_FAULT_KEEP: artifacts of this passing run in %s", dir)
		}
		return r
	}
	dir := ArtifactsDir(t)
	WriteArtifacts(t, dir, rec, c, &r)
	if c != nil {
		c.reported = true
	}
	for _, v := range r.Violations[:min(len(r.Violations), 20)] {
		t.Errorf("violation: %s", v)
	}
	if r.Linearizable != porcupine.Ok {
		t.Errorf("porcupine: history is %s (not linearizable against the registrar model)", r.Linearizable)
	}
	t.Errorf("artifacts (history.json, linearizability.html, member logs) in %s", dir)
	return r
}

// WriteArtifacts writes the history, the visualisation (when r has one)
// and the members' logs into dir.
func WriteArtifacts(t testing.TB, dir string, rec *Recorder, c *Cluster, r *Report) {
	if err := rec.WriteJSON(filepath.Join(dir, "history.json")); err != nil {
		t.Logf("writing history: %v", err)
	}
	if r != nil {
		if err := porcupine.VisualizePath(Model(), r.info, filepath.Join(dir, "linearizability.html")); err != nil {
			t.Logf("writing visualisation: %v", err)
		}
	}
	if c == nil {
		return
	}
	for id, path := range c.Logs() {
		if err := copyFile(path, filepath.Join(dir, id+".log")); err != nil {
			t.Logf("copying %s's log: %v", id, err)
		}
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
