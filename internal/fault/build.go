package fault

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// BuildBinary builds ./cmd/tenure (without -race, so that the cluster runs
// at full speed under a race-enabled test binary) into dir and returns the
// binary's path.
func BuildBinary(dir string) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	bin := filepath.Join(dir, "tenure")
	// go test puts its own toolchain first on the test's PATH.
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/tenure")
	cmd.Dir = root
	// Inherited GOFLAGS=-race would slow the servers several times over.
	env := []string{}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "GOFLAGS=") {
			env = append(env, e)
		}
	}
	cmd.Env = append(env, "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building tenure: %v\n%s", err, out)
	}
	return bin, nil
}
