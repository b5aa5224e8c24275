package masterelection

// SetCandidate pauses (false) or resumes (true) this process's candidacy
// at run time, as the "paused elector" does. A paused process keeps
// following the election but never contends. A master that is paused hands
// over gracefully: its OnMasterAcquired handlers' ctx is cancelled, they get
// up to one HeartbeatInterval to return, then the lock is released and a
// slave takes over at once. A resumed process contends as soon as it finds
// the lock free. It has no effect in standalone mode.
func (m *MasterElection) SetCandidate(candidate bool) {
	if m.candidate.Swap(candidate) == candidate {
		return
	}
	select {
	case m.core.candidacy <- struct{}{}:
	default: // a change is already pending; the loop reads the latest value
	}
	m.members.infoChangedNow() // the registry entry says whether it contends
}
