package disk

// slotLocation returns the file name and header offset of hash's slot.
func (s *Store) slotLocation(hash uint64) (string, int64, bool) {
	i, ok := s.index[hash]
	if !ok {
		return "", 0, false
	}
	f, off := s.lay.locate(int(i))
	return slotFileName(s.cfg.Dir, f), off, true
}

// crash releases the store's files and lock the way a killed process
// would: no scrub, no sync.
func (s *Store) crash() {
	_ = closeAll(s.files)
	_ = s.lock.Close()
	s.closed = true
}
