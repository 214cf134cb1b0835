package statemachine

import (
	"github.com/tenurehq/tenure/internal/logpb"
	"github.com/tenurehq/tenure/internal/pool"
	"github.com/tenurehq/tenure/internal/registrar"
)

// Pools gives read access to the piece-pool domain for queries. Callers
// must not call its command methods directly.
func (m *Machine) Pools() *pool.Pools { return m.pools }

// dispatchPool runs a piece-pool command; its answer goes to Result.Pool
// (and its error, if any, to Result.Outcome.Err as well).
func (m *Machine) dispatchPool(tx *registrar.Tx, c *logpb.PoolCommand) registrar.Outcome {
	out := m.pools.Do(tx, c)
	m.pout = &out
	return registrar.Outcome{Err: out.Err}
}
