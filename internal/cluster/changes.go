package cluster

// Changes returns a channel closed after the next batch of commands is
// applied (or a snapshot restored). Long-polls wait on it and then look
// again at the state; take it before the look that may come up empty.
func (n *Node) Changes() <-chan struct{} { return n.fsm.changes() }
