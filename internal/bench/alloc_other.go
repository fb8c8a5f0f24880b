//go:build !unix

package bench

import (
	"io/fs"
	"time"
)

// ProcessCPU is not measured here.
func ProcessCPU() time.Duration { return 0 }

// allocated is the space a file occupies on disk.
func allocated(fi fs.FileInfo) int64 { return fi.Size() }
