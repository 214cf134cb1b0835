package main

import (
	"context"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenurehq/tenure/api/tenure/v1"
	"github.com/tenurehq/tenure/api/tenure/v1/tenurev1connect"
	"github.com/tenurehq/tenure/internal/opstream"
)

// benchTransport carries the operations of `tenure bench`.
type benchTransport interface {
	acquire(ctx context.Context, req *tenurev1.AcquireRequest) (*tenurev1.Lease, error)
	renew(ctx context.Context, req *tenurev1.RenewRequest) (*tenurev1.RenewResponse, error)
	release(ctx context.Context, req *tenurev1.ReleaseRequest) error
}

// unaryOps makes one unary call per operation.
type unaryOps struct{ r *remote }

func (u *unaryOps) acquire(ctx context.Context, req *tenurev1.AcquireRequest) (*tenurev1.Lease, error) {
	var l *tenurev1.Lease
	err := u.r.lease(func(c tenurev1connect.LeaseServiceClient) error {
		res, err := c.Acquire(ctx, connect.NewRequest(req))
		if err == nil {
			l = res.Msg.GetLease()
		}
		return err
	})
	return l, err
}

func (u *unaryOps) renew(ctx context.Context, req *tenurev1.RenewRequest) (*tenurev1.RenewResponse, error) {
	var out *tenurev1.RenewResponse
	err := u.r.lease(func(c tenurev1connect.LeaseServiceClient) error {
		res, err := c.Renew(ctx, connect.NewRequest(req))
		if err == nil {
			out = res.Msg
		}
		return err
	})
	return out, err
}

func (u *unaryOps) release(ctx context.Context, req *tenurev1.ReleaseRequest) error {
	return u.r.lease(func(c tenurev1connect.LeaseServiceClient) error {
		_, err := c.Release(ctx, connect.NewRequest(req))
		return err
	})
}

// pipelineOps sends lease operations over LeaseService.Pipeline streams.
type pipelineOps struct{ *opstream.LeaseSet }

func newPipelineOps(ctx context.Context, r *remote, n int) *pipelineOps {
	return &pipelineOps{opstream.OpenLease(ctx, r.leases[0], n)}
}

func (p *pipelineOps) acquire(ctx context.Context, req *tenurev1.AcquireRequest) (*tenurev1.Lease, error) {
	r, err := p.Do(ctx, &tenurev1.PipelineOp{Op: &tenurev1.PipelineOp_Acquire{Acquire: req}})
	if err != nil {
		return nil, err
	}
	return r.GetAcquire().GetLease(), nil
}

func (p *pipelineOps) renew(ctx context.Context, req *tenurev1.RenewRequest) (*tenurev1.RenewResponse, error) {
	r, err := p.Do(ctx, &tenurev1.PipelineOp{Op: &tenurev1.PipelineOp_Renew{Renew: req}})
	if err != nil {
		return nil, err
	}
	return r.GetRenew(), nil
}

func (p *pipelineOps) release(ctx context.Context, req *tenurev1.ReleaseRequest) error {
	_, err := p.Do(ctx, &tenurev1.PipelineOp{Op: &tenurev1.PipelineOp_Release{Release: req}})
	return err
}
