package actors

// Dedicated is a protoactor dispatcher that runs one actor's mailbox on one
// long-lived goroutine instead of a new goroutine each time the mailbox wakes.
// The goroutine's stack stays grown and no goroutine is created per message
// burst, which is most of the actor path's fixed cost per message.
//
// A mailbox has at most one run scheduled at a time, so Schedule never blocks.
// Stop ends the goroutine once the actor using it has stopped.
type Dedicated struct {
	runs chan func()
	done chan struct{}
}

// NewDedicated starts the dispatcher's goroutine.
func NewDedicated() *Dedicated {
	d := &Dedicated{runs: make(chan func(), 1), done: make(chan struct{})}
	go d.loop()
	return d
}

func (d *Dedicated) loop() {
	defer close(d.done)
	for fn := range d.runs {
		fn()
	}
}

// Schedule implements actor.Dispatcher.
func (d *Dedicated) Schedule(fn func()) { d.runs <- fn }

// Throughput implements actor.Dispatcher: messages per run before yielding.
func (d *Dedicated) Throughput() int { return 300 }

// Stop ends the goroutine after the runs already scheduled and waits for it.
func (d *Dedicated) Stop() {
	close(d.runs)
	<-d.done
}
