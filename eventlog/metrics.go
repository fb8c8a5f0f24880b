package eventlog

import "github.com/cockroachdb/pebble/v2"

// StorageMetrics returns the storage engine's metrics (disk usage,
// compactions, WAL bytes and fsync latency) for operators, or ErrClosed
// once the log is closed.
func (l *Log) StorageMetrics() (*pebble.Metrics, error) {
	l.readMu.RLock()
	defer l.readMu.RUnlock()
	if l.dbClosed {
		return nil, ErrClosed
	}
	return l.db.Metrics(), nil
}
