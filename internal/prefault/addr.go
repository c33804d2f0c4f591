package prefault

import "unsafe"

// addr is the address of b's first byte.
func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
