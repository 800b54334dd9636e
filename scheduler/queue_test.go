package scheduler

import (
	"slices"
	"testing"
)

func TestQueueBothEnds(t *testing.T) {
	var q queue
	var model []SeqID
	for i := range 100 {
		s := &sequence{id: SeqID(i)}
		switch i % 3 {
		case 0:
			q.pushFront(s)
			model = slices.Insert(model, 0, s.id)
		case 1:
			q.pushBack(s)
			model = append(model, s.id)
		default:
			if got := q.popFront().id; got != model[0] {
				t.Fatalf("pop %d, want %d", got, model[0])
			}
			model = model[1:]
		}
		if q.len() != len(model) {
			t.Fatalf("len %d, want %d", q.len(), len(model))
		}
		for j, id := range model {
			if q.at(j).id != id {
				t.Fatalf("at(%d) = %d, want %d", j, q.at(j).id, id)
			}
		}
	}
}
