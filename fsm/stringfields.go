package fsm

// DecodeStringFields decodes data, one msgpack map, as msgpack's
// reflection decodes it into a struct whose fields are all strings (the
// memory bodies of projection, say): field returns where the value of a
// key goes, or nil for a key the struct does not have (its value is
// skipped, whatever it is). Nil is "", a value that is not a string an
// error, a later key wins over an earlier one. The strings are substrings
// of one copy of data. The caller checks the shape first
// (codec.CheckShape), as Decode does.
func DecodeStringFields(data []byte, field func(key string) *string) error {
	var r bodyReader
	r.d.reset(string(data))
	return r.object(func(k string) (bool, error) {
		p := field(k)
		if p == nil {
			return false, nil
		}
		return true, r.str(p)
	})
}
