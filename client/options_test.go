package tenure

import "testing"

// WithLogger(nil) means no logging: the client logs from background
// goroutines (heartbeats, failover), where a nil *slog.Logger would crash
// the whole process long after New returned.
func TestWithLoggerNilDiscards(t *testing.T) {
	cfg, err := newConfig([]Option{WithLogger(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.logger == nil {
		t.Fatal("WithLogger(nil) left a nil logger")
	}
	cfg.logger.Debug("tenure: test record") // must not panic
}
