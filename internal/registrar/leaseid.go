package registrar

import "errors"

// Lease ids are ULID-shaped, 26 characters of Crockford base32 over 128
// bits: 48 bits of the issuing wall time (ms), 16 bits of the cluster's id
// tag and the 64-bit lease sequence number (which is also the lease's
// fence). Every replica derives the same id from the same record, ids sort
// by issue time, and an id is never reused because the sequence only grows.
// The registrar keeps only the sequence in memory and checks the other
// parts on lookup, so a forged id with a known sequence is not found.

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

var crockfordDec = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xFF
	}
	for i := 0; i < len(crockford); i++ {
		t[crockford[i]] = byte(i)
		if c := crockford[i]; c >= 'A' && c <= 'Z' {
			t[c+'a'-'A'] = byte(i)
		}
	}
	return t
}()

// LeaseIDLen is the length of every lease id.
const LeaseIDLen = 26

var errBadLeaseID = errors.New("not a lease id")

// FormatLeaseID renders the id of lease seq issued at wall under tag.
func FormatLeaseID(wall int64, tag uint16, seq uint64) string {
	var b [LeaseIDLen]byte
	hi := uint64(wall)<<16 | uint64(tag) // 64 bits: 48 wall + 16 tag
	lo := seq
	// 128 bits into 26 chars of 5 bits: the first char carries 3 bits.
	for i := LeaseIDLen - 1; i >= 0; i-- {
		b[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(b[:])
}

// ParseLeaseID splits an id into its wall time, tag and sequence.
func ParseLeaseID(id string) (wall int64, tag uint16, seq uint64, err error) {
	if len(id) != LeaseIDLen {
		return 0, 0, 0, errBadLeaseID
	}
	var hi, lo uint64
	for i := 0; i < LeaseIDLen; i++ {
		v := crockfordDec[id[i]]
		if v == 0xFF || (i == 0 && v > 7) {
			return 0, 0, 0, errBadLeaseID
		}
		hi = hi<<5 | lo>>59
		lo = lo<<5 | uint64(v)
	}
	return int64(hi >> 16), uint16(hi), lo, nil
}
