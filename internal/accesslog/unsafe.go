package accesslog

import "unsafe"

// unsafeString views b as a string for a call that only reads it.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
