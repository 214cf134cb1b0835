package fault

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// tenureBin is the tenure binary built once for this test binary.
var tenureBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tenure-fault-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tenureBin, err = BuildBinary(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// soak returns the long-mode duration from TENURE_FAULT_DURATION (e.g.
// 10m), or 0 for the short mode.
func soak(t *testing.T) time.Duration {
	v := os.Getenv("TENURE_FAULT_DURATION")
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("TENURE_FAULT_DURATION: %v", err)
	}
	return d
}
