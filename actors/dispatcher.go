package actors

// Dedicated is a protoactor dispatcher that runs one actor's mailbox on one
// long-lived goroutine instead of a new goroutine each time the mailbox wakes.
// The goroutine's stack stays grown and no goroutine is created per message
// burst, which is most of the actor path's fixed cost per message.
//
// A mailbox has at most one run scheduled at a time, so Schedule never blocks
// for long. Stop ends the goroutine once the actor using it has stopped; runs
// scheduled after that (a late sender's message to the dead actor) are dropped.
type Dedicated struct {
	runs chan func()
	stop chan struct{}
	done chan struct{}
}

// NewDedicated starts the dispatcher's goroutine.
func NewDedicated() *Dedicated {
	d := &Dedicated{runs: make(chan func(), 1), stop: make(chan struct{}), done: make(chan struct{})}
	go d.loop()
	return d
}

func (d *Dedicated) loop() {
	defer close(d.done)
	for {
		select {
		case fn := <-d.runs:
			fn()
		case <-d.stop:
			return
		}
	}
}

// Schedule implements actor.Dispatcher.
func (d *Dedicated) Schedule(fn func()) {
	select {
	case d.runs <- fn:
	case <-d.stop:
	}
}

// Throughput implements actor.Dispatcher: messages per run before yielding.
func (d *Dedicated) Throughput() int { return 300 }

// Stop ends the goroutine and waits for it. Call it once, after the actor
// stopped.
func (d *Dedicated) Stop() {
	close(d.stop)
	<-d.done
}
