package blockpool

import "fmt"

// nsTable interns the namespace keys of chains' first blocks as small ids, so
// a block records its namespace exactly in 4 bytes. The empty namespace is id
// 0 and is never stored. An id lives while some block holds it: the table
// holds as many keys as there are distinct namespaces among filled first
// blocks, however many namespaces ever came by.
type nsTable struct {
	ids  map[string]uint32
	keys []string // by id; keys[0] is ""
	refs []int32  // blocks holding each id
	free []uint32 // ids to reuse
}

// find returns ns's id, if some block holds ns.
func (t *nsTable) find(ns string) (uint32, bool) {
	if ns == "" {
		return 0, true
	}
	id, ok := t.ids[ns]
	return id, ok
}

// acquire returns ns's id, interning it, and counts one more holder.
func (t *nsTable) acquire(ns string) uint32 {
	if ns == "" {
		return 0
	}
	if id, ok := t.ids[ns]; ok {
		t.refs[id]++
		return id
	}
	if t.ids == nil {
		t.ids = make(map[string]uint32)
		t.keys, t.refs = []string{""}, []int32{0}
	}
	var id uint32
	if n := len(t.free); n > 0 {
		id, t.free = t.free[n-1], t.free[:n-1]
		t.keys[id], t.refs[id] = ns, 1
	} else {
		id = uint32(len(t.keys))
		t.keys, t.refs = append(t.keys, ns), append(t.refs, 1)
	}
	t.ids[ns] = id
	return id
}

// key returns id's namespace key ("" for 0).
func (t *nsTable) key(id uint32) string {
	if id == 0 {
		return ""
	}
	return t.keys[id]
}

// hold counts one more holder of id, which some block holds, and returns it.
func (t *nsTable) hold(id uint32) uint32 {
	if id != 0 {
		if t.refs[id] <= 0 {
			panic(fmt.Sprintf("kvtier: blockpool: namespace %d held while no block holds it", id))
		}
		t.refs[id]++
	}
	return id
}

// release drops one holder of id; the last one forgets the key.
func (t *nsTable) release(id uint32) {
	if id == 0 {
		return
	}
	if t.refs[id] <= 0 {
		panic(fmt.Sprintf("kvtier: blockpool: namespace %d released more than acquired", id))
	}
	t.refs[id]--
	if t.refs[id] == 0 {
		delete(t.ids, t.keys[id])
		t.keys[id] = ""
		t.free = append(t.free, id)
	}
}

// len returns how many non-empty namespaces are interned.
func (t *nsTable) len() int { return len(t.ids) }
