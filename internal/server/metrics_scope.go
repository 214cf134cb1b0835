package server

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// metricsHandler serves /metrics. The series labelled with a namespace
// (tenure_queue_tasks: a queue's name and its namespace's) are shown only
// to a principal of every namespace ("*") or without authentication; the
// cluster-wide counters and gauges, which name reasons and states, not
// resources, to every authenticated principal.
func (s *Server) metricsHandler() http.Handler {
	all := promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{})
	scoped := promhttp.HandlerFor(withoutNamespaces{s.reg}, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := principalOf(r.Context()); p != nil && !p.AllNamespaces() {
			scoped.ServeHTTP(w, r)
			return
		}
		all.ServeHTTP(w, r)
	})
}

// withoutNamespaces gathers the metric families that carry no namespace
// label.
type withoutNamespaces struct{ g prometheus.Gatherer }

func (w withoutNamespaces) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := w.g.Gather()
	out := mfs[:0]
	for _, mf := range mfs {
		// tenure_queue_tasks_unreported counts queues of every namespace.
		if !labelled(mf, "namespace") && !strings.HasPrefix(mf.GetName(), "tenure_queue_tasks") {
			out = append(out, mf)
		}
	}
	return out, err
}

func labelled(mf *dto.MetricFamily, name string) bool {
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				return true
			}
		}
	}
	return false
}
