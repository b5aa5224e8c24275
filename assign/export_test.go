package assign

// KeptItems returns p's copy of its set's items, which it puts back when
// Redis loses them.
func KeptItems(p *Planner) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.kept.items
}
