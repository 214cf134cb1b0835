package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/internal/server"
)

// writeJSON writes m in the protobuf JSON mapping (lowerCamelCase, enums by
// name, RFC 3339 UTC times), one document per line, so that a stream of
// results is NDJSON. Zero values are written too ("found": false, "dead":
// "0", "tasks": []), so that scripts find every field they read; enums at
// zero are left out, as the API leaves them.
func writeJSON(w io.Writer, m proto.Message) error {
	b, err := server.MarshalJSON(m) // the API's own JSON form, on one line
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// newTable returns a tabwriter for human tables.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

// fmtDuration prints a duration for humans: "41.2s" below a minute,
// "5m30s" above.
func fmtDuration(d time.Duration) string {
	if d < 0 {
		return "-" + fmtDuration(-d)
	}
	if d < time.Minute {
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	return d.Round(time.Second).String()
}

func fmtPBDuration(d *durationpb.Duration) string {
	if d == nil {
		return "-"
	}
	return fmtDuration(d.AsDuration())
}

// fmtTime prints a time in UTC, RFC 3339.
func fmtTime(t *timestamppb.Timestamp) string {
	if t == nil || (t.Seconds == 0 && t.Nanos == 0) {
		return "-"
	}
	return t.AsTime().UTC().Format(time.RFC3339)
}

// enumName turns MODE_EXCLUSIVE into "exclusive".
func enumName(name, prefix string) string {
	return strings.ToLower(strings.TrimPrefix(name, prefix))
}

func leaseMode(l *tenurev1.Lease) string  { return enumName(l.GetMode().String(), "MODE_") }
func leaseState(l *tenurev1.Lease) string { return enumName(l.GetState().String(), "STATE_") }

// timeLeft is the lease's time left at the registrar, "-" once it ended.
func timeLeft(l *tenurev1.Lease) string {
	if l.GetState() != tenurev1.State_STATE_ACTIVE {
		return "-"
	}
	return fmtPBDuration(l.GetTimeRemaining())
}

const leaseHeader = "LEASE ID\tRESOURCE\tHOLDER\tMODE\tSTATE\tFENCE\tTTL\tEXPIRES\tLEFT"

func leaseRow(l *tenurev1.Lease) string {
	return strings.Join([]string{
		l.GetLeaseId(), l.GetResource(), l.GetHolder(), leaseMode(l), leaseState(l),
		strconv.FormatUint(l.GetFence(), 10), fmtPBDuration(l.GetTtl()), fmtTime(l.GetExpiresAt()), timeLeft(l),
	}, "\t")
}

// writeLeases prints leases as a table.
func writeLeases(w io.Writer, leases ...*tenurev1.Lease) error {
	tw := newTable(w)
	fmt.Fprintln(tw, leaseHeader)
	for _, l := range leases {
		fmt.Fprintln(tw, leaseRow(l))
	}
	return tw.Flush()
}

// writeWaiters prints a resource's queued acquires, first in line first,
// after its leases.
func writeWaiters(w io.Writer, waiters []*tenurev1.Waiter) error {
	fmt.Fprintln(w)
	tw := newTable(w)
	fmt.Fprintln(tw, "WAITER\tHOLDER\tMODE\tWAITS UP TO")
	for _, wt := range waiters {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", wt.GetWaiterId(), wt.GetHolder(), enumName(wt.GetMode().String(), "MODE_"), fmtPBDuration(wt.GetWaitRemaining()))
	}
	return tw.Flush()
}

// writeLeaseDetail prints one lease field by field.
func writeLeaseDetail(w io.Writer, l *tenurev1.Lease) error {
	tw := newTable(w)
	row := func(k, v string) {
		if v != "" && v != "-" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	row("lease id", l.GetLeaseId())
	row("namespace", l.GetNamespace())
	row("resource", l.GetResource())
	row("holder", l.GetHolder())
	row("mode", leaseMode(l))
	row("state", leaseState(l))
	row("fence", strconv.FormatUint(l.GetFence(), 10))
	row("ttl", fmtPBDuration(l.GetTtl()))
	row("issued", fmtTime(l.GetIssuedAt()))
	row("expires", fmtTime(l.GetExpiresAt()))
	row("time left", timeLeft(l))
	if l.GetRenewalCount() > 0 {
		row("renewals", strconv.FormatUint(uint64(l.GetRenewalCount()), 10))
		row("last renewed", fmtTime(l.GetLastRenewedAt()))
	}
	row("terminated", fmtTime(l.GetTerminatedAt()))
	if r := l.GetReleaseReason(); r != tenurev1.ReleaseReason_RELEASE_REASON_UNSPECIFIED {
		row("release reason", enumName(r.String(), "RELEASE_REASON_"))
	}
	row("revoke reason", l.GetRevokeReason())
	row("parent", l.GetParentLeaseId())
	row("ended by", l.GetEndedByLeaseId())
	row("scope", scopeText(l.GetScope()))
	row("budget", budgetText(l))
	if len(l.GetSignature()) > 0 {
		row("certificate", fmt.Sprintf("signed (key %s)", l.GetKeyId()))
	}
	return tw.Flush()
}

const eventHeader = "INDEX\tTIME\tTYPE\tRESOURCE\tLEASE ID\tHOLDER\tFENCE\tACTOR"

func eventRow(e *tenurev1.Event) string {
	return strings.Join([]string{
		strconv.FormatUint(e.GetIndex(), 10), fmtTime(e.GetTime()), e.GetType(), e.GetResource(),
		e.GetLeaseId(), e.GetHolder(), strconv.FormatUint(e.GetFence(), 10), e.GetActor(),
	}, "\t")
}
