package messages

import (
	"sync"
	"testing"
)

// TestCompletionEitherOrder: the outcome reaches waiters whether they ask
// for Done before the actor completes (a channel of their own, closed then)
// or after (the shared closed channel), and concurrently, under -race.
func TestCompletionEitherOrder(t *testing.T) {
	early := NewCompletion()
	d := early.Done()
	select {
	case <-d:
		t.Fatal("done before Complete")
	default:
	}
	early.Complete(OnboardOutcome{ValidTokens: 3})
	<-d
	if early.Outcome().ValidTokens != 3 {
		t.Fatal("early waiter: wrong outcome")
	}
	late := NewCompletion()
	late.Complete(OnboardOutcome{ValidTokens: 5})
	select {
	case <-late.Done():
	default:
		t.Fatal("completed, but Done is not closed")
	}
	if late.Outcome().ValidTokens != 5 {
		t.Fatal("late waiter: wrong outcome")
	}
	for range 200 {
		c := NewCompletion()
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if c.Outcome().ValidTokens != 7 {
					t.Error("concurrent waiter: wrong outcome")
				}
			}()
		}
		c.Complete(OnboardOutcome{ValidTokens: 7})
		wg.Wait()
	}
}
