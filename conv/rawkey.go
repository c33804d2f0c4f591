package conv

import "hash/maphash"

// RawKey is a 128-bit key of some bytes (RawKeyOf): equal bytes have equal
// keys, and distinct bytes share one with a chance of 2^-128; the seeds
// are random per process, so no one outside can make two collide. It is
// not a cryptographic hash and is never stored.
type RawKey [2]uint64

var rawSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// RawKeyOf returns the RawKey of b.
func RawKeyOf(b []byte) RawKey {
	return RawKey{maphash.Bytes(rawSeeds[0], b), maphash.Bytes(rawSeeds[1], b)}
}

// rawKeyString is RawKeyOf a string's bytes.
func rawKeyString(s string) RawKey {
	return RawKey{maphash.String(rawSeeds[0], s), maphash.String(rawSeeds[1], s)}
}
