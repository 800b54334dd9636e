package actors

func mustHold(err error) {
	if err != nil {
		panic("kvtier: invariants: " + err.Error())
	}
}
