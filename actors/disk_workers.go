package actors

import (
	"sync"
	"time"

	"github.com/kvtier/kvtier/disk"
)

// diskJob is one disk I/O, or the copy of a read payload into the pinned
// slots waiting for it: exactly one of write, read, remove and copy is set. The actor
// fills it, a worker runs Execute and sets err, and the actor, back on its own
// goroutine, completes the op in the store.
type diskJob struct {
	write   *disk.WriteOp
	payload []byte // the pinned slot's bytes; read-only for the worker
	wreq    *diskWriteReq

	read *disk.ReadOp
	buf  []byte // private aligned buffer the worker reads into
	rjob *diskReadJob

	remove *disk.RemoveOp
	dreqs  []*diskDeleteReq // the deletes this scrub answers (one, or several waiting on one write)

	copy *diskCopy // buf is the verified payload it copies from

	err  error         // set by the worker before it reports
	took time.Duration // how long Execute ran
	// cancelled marks a job still queued at shutdown: Execute never ran.
	cancelled bool
}

// diskJobDone is a worker's report, sent to the disk actor's mailbox.
type diskJobDone struct{ job *diskJob }

// diskWorkers runs blocking disk I/O on a fixed set of goroutines. It is owned
// by the actor goroutine (not safe for concurrent use) except for the worker
// goroutines themselves, which only receive jobs and report them.
//
// The actor never blocks on it: the jobs channel has room for one job per
// worker and at most that many are handed over before their reports come
// back; the rest wait in queue.
type diskWorkers struct {
	jobs    chan *diskJob
	queue   []*diskJob            // submitted, not yet handed to a worker
	running map[*diskJob]struct{} // handed to a worker, report not yet handled
	n       int
	wg      sync.WaitGroup
	stopped bool
}

// startDiskWorkers starts n workers; each calls report after every job, from
// its own goroutine.
func startDiskWorkers(n int, report func(*diskJob)) *diskWorkers {
	w := &diskWorkers{jobs: make(chan *diskJob, n), running: make(map[*diskJob]struct{}), n: n}
	w.wg.Add(n)
	for range n {
		go func() {
			defer w.wg.Done()
			for j := range w.jobs {
				start := time.Now()
				switch {
				case j.write != nil:
					j.err = j.write.Execute(j.payload)
				case j.remove != nil:
					j.err = j.remove.Execute()
				case j.copy != nil:
					j.copy.run()
				default:
					j.err = j.read.Execute(j.buf)
				}
				j.took = time.Since(start)
				report(j)
			}
		}()
	}
	return w
}

// submit queues j and hands out as many queued jobs as there are idle workers.
func (w *diskWorkers) submit(j *diskJob) {
	if w.stopped {
		panic("kvtier: actors: disk job submitted after the workers stopped")
	}
	w.queue = append(w.queue, j)
	w.pump()
}

// submitFirst queues j ahead of every queued job: a copy finishes reads
// whose I/O is done, so it should not wait behind I/O not yet started.
func (w *diskWorkers) submitFirst(j *diskJob) {
	if w.stopped {
		panic("kvtier: actors: disk job submitted after the workers stopped")
	}
	w.queue = append([]*diskJob{j}, w.queue...)
	w.pump()
}

func (w *diskWorkers) pump() {
	for len(w.running) < w.n && len(w.queue) > 0 {
		j := w.queue[0]
		w.queue[0] = nil
		w.queue = w.queue[1:]
		w.running[j] = struct{}{}
		w.jobs <- j // never blocks: fewer than n jobs are outstanding
	}
}

// done accepts a worker's report. It returns false for a report the actor
// already handled during stop, which the caller must ignore.
func (w *diskWorkers) done(j *diskJob) bool {
	if _, ok := w.running[j]; !ok {
		return false
	}
	delete(w.running, j)
	w.pump()
	return true
}

// unqueue takes j out of the queue if no worker has it yet, and says so.
func (w *diskWorkers) unqueue(j *diskJob) bool {
	for i, q := range w.queue {
		if q == j {
			w.queue = append(w.queue[:i], w.queue[i+1:]...)
			return true
		}
	}
	return false
}

// queued returns how many jobs wait for a worker.
func (w *diskWorkers) queued() int { return len(w.queue) }

// stop waits for every job handed to a worker to finish and ends the
// workers. It returns the jobs that never reached a worker (marked
// cancelled) and the finished ones whose reports the actor has not handled;
// the caller completes both. Reports still in the mailbox become stale
// (done returns false).
func (w *diskWorkers) stop() (cancelled, finished []*diskJob) {
	if w.stopped {
		return nil, nil
	}
	w.stopped = true
	cancelled, w.queue = w.queue, nil
	for _, j := range cancelled {
		j.cancelled = true
	}
	close(w.jobs)
	w.wg.Wait()
	for j := range w.running {
		finished = append(finished, j)
	}
	clear(w.running)
	return cancelled, finished
}
