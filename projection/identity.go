package projection

import (
	"fmt"
	"hash/fnv"
	"reflect"

	"github.com/pegasus-engine/pegasus/fsm"
)

// Identity names what persisted projections were built by: this package's
// Version, the current fsm machine, the options that change folded state,
// and a fingerprint of the shape of every persisted type (fsm.Task and the
// read models of this package). A persisted identity that differs from the
// running one means the projections must be rebuilt from zero. The
// fingerprint makes that automatic when a field is added to fsm.Task or to
// a read model, even if nobody remembered to bump Version.
func Identity(o Options) string {
	st := o.Stats.EnsureDefaults()
	return fmt.Sprintf("projection/v%d %s/v%d shape/%s stats(window=%d,keys=%d)",
		Version, fsm.MachineName, fsm.MachineVersion, shapeFingerprint, st.Window, st.MaxKeys)
}

// shapeFingerprint hashes the persisted types' shapes, computed once.
var shapeFingerprint = fingerprint(
	reflect.TypeFor[fsm.Task](), reflect.TypeFor[Progress](), reflect.TypeFor[Summary](),
	reflect.TypeFor[statsWire](), reflect.TypeFor[Fact](), reflect.TypeFor[Episode](),
)

// fingerprint is an FNV-64a hash of the types' structure: kinds, element
// types, and every struct field's name, type and tag, in declaration
// order. Named types are expanded once (recursion stops at a type already
// on the path).
func fingerprint(types ...reflect.Type) string {
	h := fnv.New64a()
	var walk func(t reflect.Type, path map[reflect.Type]bool)
	walk = func(t reflect.Type, path map[reflect.Type]bool) {
		fmt.Fprintf(h, "%s:%s;", t.Kind(), t.String())
		if path[t] {
			return
		}
		path[t] = true
		defer delete(path, t)
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array:
			walk(t.Elem(), path)
		case reflect.Map:
			walk(t.Key(), path)
			walk(t.Elem(), path)
		case reflect.Struct:
			for i := 0; i < t.NumField(); i++ {
				f := t.Field(i)
				fmt.Fprintf(h, "{%s %q}", f.Name, f.Tag)
				walk(f.Type, path)
			}
		}
	}
	for _, t := range types {
		walk(t, map[reflect.Type]bool{})
	}
	return fmt.Sprintf("%016x", h.Sum64())
}
