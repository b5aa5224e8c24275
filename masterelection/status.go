package masterelection

// Status is a snapshot of an election's lifecycle and role, for health
// checks. It is read without any Redis call.
type Status struct {
	// Running is true from Start until the election loop has ended (Stop,
	// or a Start that gave up).
	Running bool
	// Resolved is true once the first election has resolved: this process
	// knows whether it is master or slave. It stays true after Stop.
	Resolved bool
	// IsMaster and Term are IsMaster() and Term() at the time of the call.
	IsMaster bool
	Term     int64
	// ObservedTerm is ObservedTerm() at the time of the call.
	ObservedTerm int64
	// Candidate is Candidate() at the time of the call.
	Candidate bool
}

// Status returns a snapshot of the election's lifecycle and role. It is
// safe for concurrent use and cheap: no Redis call, no wait.
func (m *MasterElection) Status() Status {
	m.mu.Lock()
	started := m.state == stateStarted
	m.mu.Unlock()
	term := m.Term()
	return Status{
		Running:      started && !isClosed(m.core.done),
		Resolved:     isClosed(m.core.resolved),
		IsMaster:     term != 0,
		Term:         term,
		ObservedTerm: m.ObservedTerm(),
		Candidate:    m.Candidate(),
	}
}

// isClosed reports whether ch is closed; ch is only ever closed, never sent on.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
