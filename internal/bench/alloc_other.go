//go:build !unix

package bench

import "io/fs"

// allocated is the space a file occupies on disk.
func allocated(fi fs.FileInfo) int64 { return fi.Size() }
