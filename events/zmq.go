package events

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
)

// SnapshotRequest is what a client sends on the replay socket, in place of
// a starting sequence number, to get a snapshot (kvtier's extension of
// vLLM's replay protocol: any request that is not 8 bytes is refused by
// vLLM, so the two never meet).
const SnapshotRequest = "kvtier-snapshot"

// endSeq is the replay end marker's sequence number: -1 as 8 big-endian
// bytes, as vLLM sends it, followed by an empty payload.
var endSeq = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// ErrNoReplay is matched by every error of a replay or snapshot the server
// did not answer: a *ReplayError (the server said it failed), or a snapshot
// answered with other than one batch.
var ErrNoReplay = errors.New("kvtier: events: replay not answered")

// ErrBadEndpoint is wrapped by the error of Listen, Subscribe,
// SubscribeListen and the replay clients for an endpoint they cannot use at
// all: not tcp:// or ipc:// (inproc:// included), or an address that does
// not parse (a missing or invalid port) or, to bind, resolve (an unknown
// host; a client that dials retries one). An endpoint that is merely busy
// (the port in use) is an I/O error, not this.
var ErrBadEndpoint = errors.New("kvtier: events: bad endpoint")

// ErrBadConfig is wrapped by the error of Listen for a ServerConfig it
// refuses, and of the clients for a bad ClientOption.
var ErrBadConfig = errors.New("kvtier: events: bad config")

// replayFailedPrefix opens the payload of a failure marker (see
// serveReplay): the end marker's sequence number with the text
// "kvtier-replay-failed <code>: <detail>" in place of its empty payload.
const replayFailedPrefix = "kvtier-replay-failed "

// The codes a failure marker carries, the first word after its prefix.
const (
	// ReplayTimedOut: the Source did not answer within
	// ServerConfig.ReplayTimeout.
	ReplayTimedOut = "timeout"
	// ReplayRefused: the request was neither an 8-byte sequence number nor
	// SnapshotRequest.
	ReplayRefused = "refused"
	// ReplayStopped: the server was closing.
	ReplayStopped = "stopped"
	// ReplayFailed: the Source returned any other error.
	ReplayFailed = "failed"
)

// EndpointError says which of its sockets Listen could not set up, on
// which endpoint, and why: Err wraps ErrBadEndpoint for an endpoint that
// does not parse or resolve, or is the listener's error (an address in
// use, a permission refused).
type EndpointError struct {
	Socket   string // "PUB" (ServerConfig.Endpoint) or "ROUTER" (ServerConfig.ReplayEndpoint)
	Endpoint string
	Err      error
}

func (e *EndpointError) Error() string {
	return fmt.Sprintf("kvtier: events: %s on %q: %v", e.Socket, e.Endpoint, e.Err)
}

// Unwrap returns Err.
func (e *EndpointError) Unwrap() error { return e.Err }

// ReplayError is a replay or snapshot request the server received and
// could not answer, as its failure marker said. It matches ErrNoReplay, and
// context.DeadlineExceeded when the code is ReplayTimedOut (the server's
// Source timed out, not the caller's context).
type ReplayError struct {
	Code   string // ReplayTimedOut, ReplayRefused, ReplayStopped, ReplayFailed, or what an unknown server sent
	Detail string // the server's account of the cause
}

func (e *ReplayError) Error() string {
	return fmt.Sprintf("kvtier: events: replay failed on the server (%s): %s", e.Code, e.Detail)
}

// Unwrap makes errors.Is(err, ErrNoReplay) hold, and
// errors.Is(err, context.DeadlineExceeded) for a timeout.
func (e *ReplayError) Unwrap() []error {
	if e.Code == ReplayTimedOut {
		return []error{ErrNoReplay, context.DeadlineExceeded}
	}
	return []error{ErrNoReplay}
}

// failurePayload is the failure marker's payload for err, the Source's
// error (or the refusal) that kept the server from answering.
func failurePayload(err error) []byte {
	code := ReplayFailed
	switch {
	case errors.Is(err, errRefused):
		code = ReplayRefused
	case errors.Is(err, context.DeadlineExceeded):
		code = ReplayTimedOut
	case errors.Is(err, context.Canceled):
		code = ReplayStopped
	}
	return []byte(replayFailedPrefix + code + ": " + err.Error())
}

// parseFailure reads a failure marker's payload; one from a server that
// does not follow kvtier's form is a failure all the same.
func parseFailure(p []byte) *ReplayError {
	rest, ok := strings.CutPrefix(string(p), replayFailedPrefix)
	if !ok {
		return &ReplayError{Code: ReplayFailed, Detail: fmt.Sprintf("unknown end marker payload of %d bytes", len(p))}
	}
	code, detail, _ := strings.Cut(rest, ": ")
	return &ReplayError{Code: code, Detail: detail}
}

var errRefused = errors.New("kvtier: events: replay request refused")

// Source answers the replay socket; the events actor implements it by
// message. The Server calls it from each replay connection's goroutine,
// so requests of several clients may call it at once. A Source method must
// not call Server.Close: Close waits for every Source call to return, its
// own included, and neither returns.
type Source interface {
	Replay(ctx context.Context, from uint64) ([]Frame, error)
	Snapshot(ctx context.Context) (Frame, error)
}

// ServerConfig configures the sockets.
type ServerConfig struct {
	// Endpoint is the PUB socket's ZMQ endpoint. As vLLM decides, the
	// socket binds when the endpoint holds "*" or "::" (a wildcard host,
	// "tcp://*:5557" or "tcp://[::]:5557", and, vLLM's test being on the
	// text, an IPv6 address written with "::": "tcp://[::1]:5557") or is
	// ipc:// (inproc:// is refused), and otherwise connects
	// to a subscriber that binds ("tcp://router:5557"), retrying in the
	// background until it answers (batches published meanwhile reach no
	// one, as with any PUB socket without subscribers). A bound port 0
	// picks a free port: see Addrs. A connecting endpoint with port 0
	// ("tcp://127.0.0.1:0") is refused (ErrBadEndpoint): nothing listens
	// there; bind a free port with "tcp://*:0".
	Endpoint string
	// ReplayEndpoint, when set, is the ROUTER socket answering replay and
	// snapshot requests.
	ReplayEndpoint string
	// Topic is every message's first frame.
	Topic string
	// QueueSize bounds the batches waiting for the PUB socket; a batch
	// past it is dropped (the caller counts it; subscribers see a gap).
	QueueSize int
	// SubscriberQueue bounds the batches waiting for one subscriber
	// (default 10000), as vLLM's hwm bounds each subscriber's pipe: a
	// batch past it is dropped for that subscriber alone (counted by
	// SubscriberDrops; it sees a gap), so a subscriber that reads slowly,
	// or not at all, delays no other.
	SubscriberQueue int
	// Linger bounds how long Close waits for each subscriber to take the
	// batches queued for it (default 1 s).
	Linger time.Duration
	// ReplayTimeout bounds the wait for the Source's answer to one replay
	// or snapshot request (default 5 s); past it the client is told the
	// replay failed (ReplayTimedOut).
	ReplayTimeout time.Duration
}

// Server owns the PUB and ROUTER sockets; their I/O runs on its own
// goroutines, so a slow subscriber never stalls the publisher's owner, nor
// another subscriber (see pub.go).
type Server struct {
	cfg    ServerConfig
	ln     net.Listener // the PUB socket's, when it binds (else it connects)
	rln    net.Listener // the replay socket's; nil without one
	queue  chan Frame
	ctx    context.Context // ends when Close has sent what was queued
	cancel context.CancelFunc
	done   chan struct{}  // closed when send returned
	conns  sync.WaitGroup // the accept or dial loop and every connection's goroutines

	// To send, which owns the subscribers.
	join   chan *pubConn
	leave  chan *pubConn
	topics chan pubTopic
	drops  atomic.Uint64

	// Publish and Close: queue is closed once, under mu, with closed set,
	// so a Publish racing Close or after it drops its batch rather than
	// sending on a closed channel.
	mu        sync.RWMutex
	closed    bool
	closeOnce sync.Once
	closeErr  error
}

// Listen binds the sockets and starts serving. src answers the replay
// socket; it may be nil only without a ReplayEndpoint. An endpoint it cannot
// use fails it with an *EndpointError naming the socket.
func Listen(cfg ServerConfig, src Source) (*Server, error) {
	if cfg.ReplayEndpoint != "" && src == nil {
		return nil, fmt.Errorf("kvtier: events: ROUTER on %q: no Source to answer it: %w", cfg.ReplayEndpoint, ErrBadConfig)
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 100000
	}
	if cfg.ReplayTimeout <= 0 {
		cfg.ReplayTimeout = 5 * time.Second
	}
	if cfg.SubscriberQueue <= 0 {
		cfg.SubscriberQueue = 10000
	}
	if cfg.Linger <= 0 {
		cfg.Linger = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, queue: make(chan Frame, cfg.QueueSize), ctx: ctx, cancel: cancel, done: make(chan struct{}),
		join: make(chan *pubConn), leave: make(chan *pubConn), topics: make(chan pubTopic)}
	if binds(cfg.Endpoint) {
		ln, err := listenEndpoint(cfg.Endpoint)
		if err != nil {
			cancel()
			return nil, &EndpointError{Socket: "PUB", Endpoint: cfg.Endpoint, Err: err}
		}
		s.ln = ln
	} else if err := checkConnectEndpoint(cfg.Endpoint); err != nil {
		cancel()
		return nil, &EndpointError{Socket: "PUB", Endpoint: cfg.Endpoint, Err: err}
	}
	if cfg.ReplayEndpoint != "" {
		rln, err := listenEndpoint(cfg.ReplayEndpoint)
		if err != nil {
			if s.ln != nil {
				_ = s.ln.Close()
			}
			cancel()
			return nil, &EndpointError{Socket: "ROUTER", Endpoint: cfg.ReplayEndpoint, Err: err}
		}
		s.rln = rln
		s.conns.Add(1)
		go s.acceptReplay(src)
	}
	s.conns.Add(1)
	if s.ln != nil {
		go s.accept()
	} else {
		go s.dial(strings.TrimPrefix(cfg.Endpoint, "tcp://"))
	}
	go s.send()
	return s, nil
}

// binds reports whether a PUB socket on ep binds (vLLM's rule; an
// inproc:// endpoint binds too, and is refused: the PUB socket speaks TCP
// or a Unix socket).
func binds(ep string) bool {
	return strings.Contains(ep, "*") || strings.Contains(ep, "::") || strings.HasPrefix(ep, "ipc://") || strings.HasPrefix(ep, "inproc://")
}

// listenAddr turns vLLM's "tcp://*:5557" into what Go listens on.
func listenAddr(ep string) string { return strings.Replace(ep, "://*:", "://0.0.0.0:", 1) }

// Addrs returns the endpoints bound, ports resolved ("" for no replay), as
// a client connects to them: a wildcard host ("tcp://*:0", "tcp://[::]:0")
// is reported as 127.0.0.1 ("tcp://127.0.0.1:41234"), which libzmq
// connects to without ZMQ_IPV6 (it cannot connect to "tcp://[::]:41234");
// a client on another machine uses this one's address with the port. A
// named host, and an ipc:// path, are reported as bound. A PUB socket
// that connects (a named host) reports its Endpoint.
func (s *Server) Addrs() (pub, replay string) {
	pub = s.cfg.Endpoint
	if s.ln != nil {
		pub = connectEndpoint(s.ln)
	}
	if s.rln != nil {
		replay = connectEndpoint(s.rln)
	}
	return pub, replay
}

// Publish queues f for the PUB socket; false, and nothing queued, when the
// queue is full or Close has begun (a batch dropped, as for a full queue).
// It may be called concurrently with Close.
func (s *Server) Publish(f Frame) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return false
	}
	select {
	case s.queue <- f:
		return true
	default:
		return false
	}
}

// SubscriberDrops counts the batches dropped for a subscriber whose queue
// (ServerConfig.SubscriberQueue) was full, one per batch and subscriber.
func (s *Server) SubscriberDrops() uint64 { return s.drops.Load() }

// send owns the subscribers: it hands each batch to the queue of every
// subscriber of its topic, or drops it for a subscriber whose queue is
// full. Once Close has closed s.queue it closes every subscriber's queue
// and waits, for up to Linger, for their writers to send what they hold.
func (s *Server) send() {
	defer close(s.done)
	subs := map[*pubConn]map[string]bool{}
	for {
		select {
		case f, ok := <-s.queue:
			if !ok {
				s.drain(subs)
				return
			}
			for pc, topics := range subs {
				if wants(topics, s.cfg.Topic) {
					s.offer(pc, f)
				}
			}
		case pc := <-s.join:
			subs[pc] = map[string]bool{}
		case t := <-s.topics:
			// Every batch has the one topic: a prefix of another selects
			// nothing and is not kept (a peer could send any number).
			topics, ok := subs[t.c]
			switch {
			case !ok || !strings.HasPrefix(s.cfg.Topic, t.topic):
			case t.on:
				topics[t.topic] = true
			default:
				delete(topics, t.topic)
			}
		case pc := <-s.leave:
			if _, ok := subs[pc]; ok {
				delete(subs, pc)
				pc.out.close()
			}
		}
	}
}

// offer queues f for pc, or drops it for pc alone, counted, when pc's
// queue holds SubscriberQueue batches.
func (s *Server) offer(pc *pubConn, f Frame) {
	if !pc.out.push(f) {
		s.drops.Add(1)
	}
}

// drain closes every subscriber's queue and waits, for up to Linger in
// all, for its writer to send what it holds (or to fail).
func (s *Server) drain(subs map[*pubConn]map[string]bool) {
	for pc := range subs {
		pc.out.close()
	}
	linger := time.NewTimer(s.cfg.Linger)
	defer linger.Stop()
	for pc := range subs {
		select {
		case <-pc.wrote:
		case <-linger.C:
			return
		}
	}
}

func seqBytes(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// acceptReplay serves every connection made to the replay socket, each on
// its own goroutine (serveReplay), so that a client that does not read its
// answer holds up no other.
func (s *Server) acceptReplay(src Source) {
	defer s.conns.Done()
	acceptEach(s.ctx, s.rln, &s.conns, func(nc net.Conn) { s.serveReplay(nc, src) })
}

// serveReplay speaks ROUTER to one client (a DEALER, or anything that
// sends requests with an empty delimiter frame first or none) until it
// leaves or Close ends it. A request, the last frame of a message: an
// 8-byte start sequence number gets the buffered batches from there, a
// SnapshotRequest the snapshot, each reply ["", seq, payload], then the
// end marker ["", -1, ""].
//
// A request it cannot answer (the Source failed or timed out, or the
// request is neither) gets no batches and, in place of the end marker, the
// failure marker ["", -1, "kvtier-replay-failed <code>: <detail>"] (see
// ReplayError). vLLM's replay never fails and has no such reply; the
// failure marker keeps the end marker's sequence number, so a client that
// stops at -1 stops there, and its payload is not a msgpack batch (it
// begins with a positive fixint), so a client that stops at an empty
// payload fails to decode it rather than taking a failure for "nothing to
// replay".
func (s *Server) serveReplay(nc net.Conn, src Source) {
	stop := context.AfterFunc(s.ctx, func() { _ = nc.Close() })
	defer stop()
	defer nc.Close()
	c, err := timedHandshake(newGuardConn(nc), zmq4.Router, zmq4.SocketIdentity("kvtier-replay"), true /* server */)
	if err != nil {
		return
	}
	for {
		msg, err := c.RecvMsg()
		if err != nil {
			return
		}
		if msg.Type != zmq4.UsrMsg || len(msg.Frames) == 0 {
			continue
		}
		for _, r := range s.answer(src, msg.Frames[len(msg.Frames)-1]) {
			if err := c.SendMsg(zmq4.NewMsgFrom(nil, r.seq, r.payload)); err != nil {
				return
			}
		}
	}
}

// reply is one [seq, payload] of an answer.
type reply struct{ seq, payload []byte }

// answer returns the replies to req, the end or failure marker last.
func (s *Server) answer(src Source, req []byte) []reply {
	var frames []Frame
	var err error
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.ReplayTimeout)
	defer cancel()
	switch {
	case len(req) == 8:
		frames, err = src.Replay(ctx, binary.BigEndian.Uint64(req))
	case string(req) == SnapshotRequest:
		var f Frame
		if f, err = src.Snapshot(ctx); err == nil {
			frames = []Frame{f}
		}
	default:
		err = fmt.Errorf("%w: a request of %d bytes (want an 8-byte sequence number or %q)", errRefused, len(req), SnapshotRequest)
	}
	if err != nil {
		return []reply{{endSeq, failurePayload(err)}}
	}
	out := make([]reply, 0, len(frames)+1)
	for _, f := range frames {
		out = append(out, reply{seqBytes(f.Seq), f.Payload})
	}
	return append(out, reply{endSeq, nil})
}

// Close stops the sockets; batches still queued are sent first, to every
// subscriber that takes them within ServerConfig.Linger. A replay or
// snapshot request in progress is cancelled and Close waits for its Source
// call to return: none is made after Close. No goroutine of the Server
// runs once Close has returned.
//
// Cancelling closes every connection, PUB and replay: an answer to a
// replay client that does not read blocks in a socket write that has no
// deadline, and only closing the connection ends it.
//
// Close may be called more than once, and concurrently with Publish: a
// later call waits for the first to finish and returns its error. It must
// not be called from a Source method (it would wait for that call).
func (s *Server) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

// CloseContext is Close, with ctx bounding the wait for subscribers too:
// once ctx ends, every connection is closed at once, and a subscriber
// loses what it had not taken, as after Linger.
func (s *Server) CloseContext(ctx context.Context) error {
	stop := context.AfterFunc(ctx, s.cancel)
	defer stop()
	return s.Close()
}

func (s *Server) close() error {
	s.mu.Lock()
	s.closed = true
	close(s.queue)
	s.mu.Unlock()
	<-s.done
	s.cancel() // closes every connection, and cancels the Source calls
	var err error
	if s.ln != nil {
		err = s.ln.Close()
	}
	if s.rln != nil {
		err = errors.Join(err, s.rln.Close())
	}
	s.conns.Wait()
	return err
}
