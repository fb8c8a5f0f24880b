package agent

import "sync"

// idMap is a map by task id under a read-write lock, for what the agent
// keeps per task while it runs (correlations, handoffs). A sync.Map
// allocates an entry for every new key and boxes a value that is not a
// pointer (a correlation id); this map reuses its room once grown, and
// its reads (the hook's, the stages') share the lock.
type idMap[V comparable] struct {
	mu sync.RWMutex
	m  map[string]V
}

func (m *idMap[V]) load(id string) (V, bool) {
	m.mu.RLock()
	v, ok := m.m[id]
	m.mu.RUnlock()
	return v, ok
}

func (m *idMap[V]) store(id string, v V) {
	m.mu.Lock()
	if m.m == nil {
		m.m = map[string]V{}
	}
	m.m[id] = v
	m.mu.Unlock()
}

func (m *idMap[V]) remove(id string) {
	m.mu.Lock()
	delete(m.m, id)
	m.mu.Unlock()
}

// loadAndRemove removes id's value and returns it, if there was one.
func (m *idMap[V]) loadAndRemove(id string) (V, bool) {
	m.mu.Lock()
	v, ok := m.m[id]
	if ok {
		delete(m.m, id)
	}
	m.mu.Unlock()
	return v, ok
}

// compareAndRemove removes id's value if it is old.
func (m *idMap[V]) compareAndRemove(id string, old V) bool {
	m.mu.Lock()
	v, ok := m.m[id]
	if ok = ok && v == old; ok {
		delete(m.m, id)
	}
	m.mu.Unlock()
	return ok
}
