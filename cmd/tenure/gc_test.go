package main

import "testing"

func TestMemTotal(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"MemTotal:       24684092 kB\nMemFree:        21296212 kB\n", 24684092 << 10},
		{"MemFree:        21296212 kB\nMemTotal:  1024 kB\n", 1024 << 10},
		{"MemTotal: lots kB\n", 0},
		{"MemTotal: 1024\n", 0},
		{"", 0},
	} {
		if got := memTotal(c.in); got != c.want {
			t.Errorf("memTotal(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestCgroupLimit(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"max\n", 0},
		{"2147483648\n", 2 << 30},
		{"9223372036854771712\n", 9223372036854771712},
		{"", 0},
		{"-1", 0},
	} {
		if got := cgroupLimit(c.in); got != c.want {
			t.Errorf("cgroupLimit(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}
