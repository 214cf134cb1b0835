package ledger

// SetWriteMarker replaces how Prune writes its marker, until the returned
// func restores it.
func SetWriteMarker(f func(path string, b []byte) error) (restore func()) {
	old := writeMarker
	writeMarker = f
	return func() { writeMarker = old }
}

// ReserveName is the reserve file's name in a ledger dir.
const ReserveName = reserveName
