package cluster

import (
	"cmp"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenurehq/tenure/internal/ledger"
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/queue"
	"github.com/tenurehq/tenure/internal/registrar"
	"github.com/tenurehq/tenure/internal/statemachine"
)

// metrics are the node's Prometheus instruments. The counters count what
// this process applied as it happened: not the entries it replays from its
// log at start (those were counted before, by the process that applied
// them first), so a restart resets them as Prometheus expects of a
// counter, and members started at different times count from then.
type metrics struct {
	ended         *prometheus.CounterVec // by state
	grants        prometheus.Counter
	renewals      prometheus.Counter
	lateness      prometheus.Histogram
	applyLatency  prometheus.Histogram
	batchSize     prometheus.Histogram
	leaderChanges prometheus.Counter

	// endedBy caches ended's counters by state (observe's, under the
	// FSM's lock), sparing a label lookup per ended lease.
	endedBy [8]prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, n *Node) *metrics {
	m := &metrics{
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tenure_leases_ended_total",
			Help: "Leases that ended since this process started, by terminal state (RELEASED, EXPIRED, REVOKED)."}, []string{"state"}),
		grants: prometheus.NewCounter(prometheus.CounterOpts{Name: "tenure_grants_total",
			Help: "Leases granted (acquires, waiter hand-offs, transfers)."}),
		renewals: prometheus.NewCounter(prometheus.CounterOpts{Name: "tenure_renewals_total",
			Help: "Lease renewals applied."}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tenure_expiry_lateness_seconds",
			Help:    "Apply tick of an expiry minus the lease's deadline.",
			Buckets: []float64{0, .001, .005, .01, .025, .05, .1, .25, .5, 1, 5}}),
		applyLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tenure_raft_apply_seconds",
			Help:    "Time from proposing a batch to Raft until its results are back.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tenure_raft_batch_commands",
			Help:    "Commands per proposed Raft log entry.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{Name: "tenure_leader_changes_total",
			Help: "Times this node gained or lost leadership."}),
	}
	if reg == nil {
		return m
	}
	reg.MustRegister(m.ended, m.grants, m.renewals, m.lateness,
		m.applyLatency, m.batchSize, m.leaderChanges,
		// Read from the state, not counted as records apply: a node
		// restored from a snapshot counted from zero (and went negative
		// as the restored leases ended).
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tenure_leases_active",
			Help: "Leases currently active (as of the last applied record)."},
			func() float64 {
				return n.fsm.count(func(m *statemachine.Machine) int { return m.Registrar().ActiveCount() })
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tenure_waiters",
			Help: "Acquires waiting in resource queues."},
			func() float64 {
				return n.fsm.count(func(m *statemachine.Machine) int { return m.Registrar().WaiterCount() })
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tenure_leader_changes_seen_total",
			Help: "Changes of leader this node has seen (to another member, to itself, or to none: an election)."},
			func() float64 { return float64(n.reach.leaderChanges.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tenure_has_leader",
			Help: "1 when this node knows a leader."}, func() float64 {
			if id, _ := n.Leader(); id != "" {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tenure_raft_commit_index",
			Help: "Raft commit index."}, func() float64 { return float64(n.raft.CommitIndex()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tenure_raft_applied_index",
			Help: "Highest Raft index applied to the state machine."}, func() float64 { return float64(n.fsm.applied.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tenure_ledger_write_failed",
			Help: "1 when this node stopped writing its durable ledger (see the log; restart once fixed)."}, func() float64 {
			if d := n.fsm.ledger; d != nil && d.failed.Load() {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tenure_leases_retained",
			Help: "Terminal leases kept for Get and List until their retention passes (or the namespace's max_retained_leases prunes them)."},
			func() float64 {
				return n.fsm.count(func(m *statemachine.Machine) int { return m.Registrar().Retained() })
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tenure_tasks_finished_retained",
			Help: "Finished queue tasks kept until their retention passes (or the namespace's max_retained_tasks prunes them)."},
			func() float64 { return n.fsm.count(func(m *statemachine.Machine) int { return m.Queues().Finished() }) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tenure_ledger_bytes",
			Help: "Size of the durable ledger's files in DATA-DIR/ledger (kept within --ledger-max-size)."}, func() float64 {
			if d := n.fsm.ledger; d != nil {
				return float64(ledgerBytes(d.dir))
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tenure_raft_last_snapshot_index",
			Help: "Raft index of this node's latest snapshot (the log before it is compacted away)."}, func() float64 {
			i, _ := strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64)
			return float64(i)
		}),
		queueCollector{f: n.fsm},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tenure_is_leader",
			Help: "1 when this node is the leader."}, func() float64 {
			if n.leader.Load() != nil {
				return 1
			}
			return 0
		}),
	)
	for _, st := range []registrar.State{registrar.Released, registrar.Expired, registrar.Revoked} {
		m.endedCounter(st) // each series exists from the start, at 0
	}
	return m
}

// observe updates the counters from one applied command. Called under the
// FSM's write lock.
func (m *metrics) observe(sm *statemachine.Machine, _ *logpb.Command, res statemachine.Result) {
	for _, s := range res.Records {
		switch b := s.Record.Body.(type) {
		case *logpb.Record_Issued:
			m.grants.Inc()
		case *logpb.Record_Renewed:
			m.renewals.Inc()
		case *logpb.Record_Ended:
			st := registrar.State(b.Ended.State)
			m.endedCounter(st).Inc()
			if st == registrar.Expired {
				if l, err := sm.Registrar().Get(b.Ended.GetLease().GetLeaseId(), registrar.Tick(s.Record.Tick)); err == nil {
					late := registrar.Tick(s.Record.Tick) - l.Deadline()
					m.lateness.Observe(registrar.Dur(int64(late)).Seconds())
				}
			}
		}
	}
}

func (m *metrics) endedCounter(st registrar.State) prometheus.Counter {
	if int(st) >= len(m.endedBy) {
		return m.ended.WithLabelValues(st.String())
	}
	if m.endedBy[st] == nil {
		m.endedBy[st] = m.ended.WithLabelValues(st.String())
	}
	return m.endedBy[st]
}

// maxQueueSeries bounds the queues tenure_queue_tasks reports (each is six
// series): a namespace may name a queue per user or per job.
const maxQueueSeries = 1000

var queueTasksDesc = prometheus.NewDesc("tenure_queue_tasks",
	"Tasks of each queue by state, as of the last applied record (at most 1,000 queues; tenure_queue_tasks_unreported counts the rest).",
	[]string{"namespace", "queue", "state"}, nil)

var queueOldestReadyDesc = prometheus.NewDesc("tenure_queue_oldest_ready_seconds",
	"How long each queue's task claimable longest has waited since it became claimable (0 when none is): the queue's latency (same queues as tenure_queue_tasks).",
	[]string{"namespace", "queue"}, nil)

var queueUnreportedDesc = prometheus.NewDesc("tenure_queue_tasks_unreported",
	"Queues left out of tenure_queue_tasks past its limit of 1,000.", nil, nil)

// queueCollector reports every queue's tasks by state, read from the state
// when scraped (a count kept per record would start from zero after a
// restore from a snapshot).
type queueCollector struct{ f *fsm }

func (c queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueTasksDesc
	ch <- queueOldestReadyDesc
	ch <- queueUnreportedDesc
}

func (c queueCollector) Collect(ch chan<- prometheus.Metric) {
	type row struct {
		ns, queue string
		c         queue.Counts
		waited    float64 // seconds
	}
	var rows []row
	c.f.count(func(m *statemachine.Machine) int {
		m.Queues().EachStats(func(ns, q string, cs queue.Counts) bool {
			rows = append(rows, row{ns: ns, queue: q, c: cs})
			return true
		})
		return 0
	})
	// The same queues on every scrape while they exist: the first by
	// namespace and name (EachStats visits them in map order).
	slices.SortFunc(rows, func(a, b row) int { return cmp.Or(strings.Compare(a.ns, b.ns), strings.Compare(a.queue, b.queue)) })
	unreported := max(0, len(rows)-maxQueueSeries)
	rows = rows[:min(len(rows), maxQueueSeries)]
	// The latency of the queues reported that may have a task to claim
	// (queued, or failed and waiting for its retry), under the lock again:
	// the applies wait for this, not for every queue's.
	wall := c.f.wall()
	c.f.count(func(m *statemachine.Machine) int {
		for i := range rows {
			if r := &rows[i]; r.c.Queued+r.c.Failed > 0 {
				if at, ok := m.Queues().OldestReady(r.ns, r.queue, wall); ok {
					r.waited = float64(max(wall-at, 0)) / 1000
				}
			}
		}
		return 0
	})
	for _, r := range rows {
		for _, s := range []struct {
			state string
			n     uint64
		}{{"queued", r.c.Queued}, {"leased", r.c.Leased}, {"succeeded", r.c.Succeeded},
			{"failed", r.c.Failed}, {"dead", r.c.Dead}, {"cancelled", r.c.Cancelled}} {
			ch <- prometheus.MustNewConstMetric(queueTasksDesc, prometheus.GaugeValue, float64(s.n), r.ns, r.queue, s.state)
		}
		ch <- prometheus.MustNewConstMetric(queueOldestReadyDesc, prometheus.GaugeValue, r.waited, r.ns, r.queue)
	}
	ch <- prometheus.MustNewConstMetric(queueUnreportedDesc, prometheus.GaugeValue, float64(unreported))
}

// ledgerBytes sums the sizes of the ledger files in dir.
func ledgerBytes(dir string) int64 {
	segs, err := ledger.Segments(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, p := range segs {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}
