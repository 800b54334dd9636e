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
