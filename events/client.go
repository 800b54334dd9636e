package events

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
)

// The consumer side (Subscribe, SubscribeListen, Replay, FetchSnapshot) is
// written, like the server's ends (see pub.go), over zmq4's ZMTP
// connections (zmq4.Open) on connections it dials or accepts itself, not
// over zmq4's sockets: zmq4 allocates a frame's body at the size its
// header claims before reading it, and its sockets give no hook on the
// connection, so one 9-byte frame header claiming 2^62 bytes from a broken
// or hostile publisher or replay server crashed the router reading it
// (makeslice: len out of range), and a claim of some gigabytes exhausted
// its memory. Every connection here reads through a guardConn bounded by
// the client's limit (WithMaxMessage), which fails the read before zmq4
// sees a size past it.

// DefaultMaxMessage is the consumer helpers' default bound on one message
// from a publisher or replay server, all its frames together: 1 GiB. The
// largest legitimate message is a snapshot (or a Full residency's batch),
// about 9 bytes a block hash plus up to 5 bytes a token id, a chain's run
// of blocks sharing one event: some 100 bytes a block of 16 tokens, so 1
// GiB holds a snapshot of about ten million such blocks. A router whose
// replicas hold more raises it with WithMaxMessage. A peer can still make
// a client allocate up to the bound for each message it claims.
const DefaultMaxMessage = 1 << 30

// ErrMessageTooBig is matched by the error of a consumer helper whose peer
// sent, or began to send, a message over the client's bound
// (DefaultMaxMessage, or WithMaxMessage's); the connection is closed
// before the message is read.
var ErrMessageTooBig = errors.New("kvtier: events: message over the client's size limit")

// ClientOption configures Subscribe, SubscribeListen, Replay and
// FetchSnapshot.
type ClientOption func(*clientConfig)

type clientConfig struct {
	maxMessage int64
}

// WithMaxMessage bounds one message the client takes, all its frames
// together, to n bytes (n > 0; DefaultMaxMessage without it). A message
// declared past it ends its connection and the call (or Recv) fails with
// ErrMessageTooBig.
func WithMaxMessage(n int64) ClientOption {
	return func(c *clientConfig) { c.maxMessage = n }
}

func newClientConfig(opts []ClientOption) (clientConfig, error) {
	c := clientConfig{maxMessage: DefaultMaxMessage}
	for _, o := range opts {
		o(&c)
	}
	if c.maxMessage <= 0 {
		return c, fmt.Errorf("kvtier: events: WithMaxMessage(%d): want a positive number of bytes: %w", c.maxMessage, ErrBadConfig)
	}
	return c, nil
}

// open runs the ZMTP handshake on nc as a socket of type typ, its reads
// bounded by the client's limit, within handshakeTimeout: a peer that
// accepts and never greets fails it then, as any failed connection does
// (Subscribe dials again, Replay fails), rather than holding it until the
// caller's context ends.
func (c clientConfig) open(nc net.Conn, typ zmq4.SocketType, server bool) (*zmq4.Conn, error) {
	tooBig := fmt.Errorf("%w (%d bytes; see WithMaxMessage)", ErrMessageTooBig, c.maxMessage)
	return timedHandshake(newLimitedConn(nc, uint64(c.maxMessage), tooBig), typ, nil, server)
}

// openZMTP runs zmq4.Open's handshake (NULL security) on g. A handshake
// zmq4 cannot parse is an error, not a panic: zmq4 slices past the end of
// a READY command whose metadata claims more bytes than it holds, and a
// peer of any end, server's or client's, could so crash the process.
func openZMTP(g *guardConn, typ zmq4.SocketType, id zmq4.SocketIdentity, server bool) (c *zmq4.Conn, err error) {
	defer func() {
		if r := recover(); r != nil {
			c, err = nil, fmt.Errorf("kvtier: events: a malformed ZMTP handshake: %v", r)
		}
	}()
	return zmq4.Open(g, null.Security(), typ, id, server, nil)
}

// dialEndpoint connects to a tcp:// or ipc:// endpoint.
func dialEndpoint(ctx context.Context, ep string) (net.Conn, error) {
	network, addr, ok := strings.Cut(ep, "://")
	switch {
	case ok && network == "tcp":
	case ok && network == "ipc":
		network = "unix"
	default:
		return nil, fmt.Errorf("%w: want tcp:// or ipc://", ErrBadEndpoint)
	}
	if network == "tcp" {
		// Port 0 parses but can never be dialed: "connection refused", retried
		// until ctx ends. Say so at once, however it is written ("0", "00",
		// "+0": the dialer reads each as 0).
		if _, port, err := net.SplitHostPort(addr); err == nil && isPortZero(port) {
			return nil, fmt.Errorf("%w: port 0 names no socket to connect to (a server bound to port 0 reports its port: Server.Addrs, Manager.EventEndpoints)", ErrBadEndpoint)
		}
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	// An address that does not parse (a port out of range or missing) can
	// never be dialed: refused at once rather than retried. An unknown host
	// is retried: DNS may name it later (a restarted pod's).
	var ae *net.AddrError
	if err != nil && errors.As(err, &ae) {
		return nil, fmt.Errorf("%w: %w", ErrBadEndpoint, err)
	}
	return nc, err
}

// isPortZero reports whether port is port 0 as the dialer reads it: "0",
// "00", with one sign or none ("+0"). A service name ("http") is left to
// the dialer.
func isPortZero(port string) bool {
	if len(port) > 1 && (port[0] == '+' || port[0] == '-') {
		port = port[1:]
	}
	n, err := strconv.ParseUint(port, 10, 16)
	return err == nil && n == 0
}

// Subscriber receives a publisher's batches (a SUB socket). Its methods
// are safe for concurrent use: Close, from another goroutine, ends a Recv
// that waits.
type Subscriber struct {
	topic  string
	cfg    clientConfig
	ctx    context.Context // ends with Close or the caller's context
	cancel context.CancelFunc
	msgs   chan received // from every connection's reader
	ln     net.Listener  // SubscribeListen's; nil for Subscribe
	conns  sync.WaitGroup
}

// received is one message a connection read, or why it ended.
type received struct {
	msg zmq4.Msg
	err error
}

// subscribeRetry is how long Subscribe waits between dials of a publisher
// that does not answer.
const subscribeRetry = 100 * time.Millisecond

// Subscribe connects to a PUB endpoint (tcp:// or ipc://) and subscribes
// to topic ("" for every topic). It waits for the publisher to listen
// (until ctx ends) and reconnects when the connection drops; ctx bounds
// the Subscriber's life too. A message over the client's bound
// (DefaultMaxMessage, or WithMaxMessage's) ends its connection before it
// is read: Recv returns ErrMessageTooBig, and the Subscriber reconnects.
func Subscribe(ctx context.Context, endpoint, topic string, opts ...ClientOption) (*Subscriber, error) {
	cfg, err := newClientConfig(opts)
	if err != nil {
		return nil, err
	}
	s := newSubscriber(ctx, topic, cfg)
	c, err := s.dial(endpoint, true /* first */)
	if err != nil {
		s.cancel()
		return nil, fmt.Errorf("kvtier: events: dialing %q: %w", endpoint, err)
	}
	s.conns.Add(1)
	go s.follow(endpoint, c)
	return s, nil
}

// SubscribeListen binds endpoint and subscribes to topic: the side of a
// router that publishers connect to (a PUB endpoint with a named host).
// Each publisher that connects is read as Subscribe reads its one, with
// the same bound on a message.
func SubscribeListen(ctx context.Context, endpoint, topic string, opts ...ClientOption) (*Subscriber, error) {
	cfg, err := newClientConfig(opts)
	if err != nil {
		return nil, err
	}
	ln, err := listenEndpoint(endpoint)
	if err != nil {
		return nil, fmt.Errorf("kvtier: events: listening on %q: %w", endpoint, err)
	}
	s := newSubscriber(ctx, topic, cfg)
	s.ln = ln
	stop := context.AfterFunc(s.ctx, func() { _ = ln.Close() })
	s.conns.Add(1)
	go func() {
		defer s.conns.Done()
		defer stop()
		s.accept()
	}()
	return s, nil
}

func newSubscriber(ctx context.Context, topic string, cfg clientConfig) *Subscriber {
	sctx, cancel := context.WithCancel(ctx)
	return &Subscriber{topic: topic, cfg: cfg, ctx: sctx, cancel: cancel, msgs: make(chan received)}
}

// zconn is one ZMTP connection and what closes it when the Subscriber
// ends.
type zconn struct {
	c    *zmq4.Conn
	nc   net.Conn
	stop func() bool
}

func (z zconn) close() {
	z.stop()
	_ = z.nc.Close()
}

// attach runs the handshake on nc and subscribes; nc is closed when the
// Subscriber ends, or at once on failure.
func (s *Subscriber) attach(nc net.Conn, server bool) (zconn, error) {
	z := zconn{nc: nc, stop: context.AfterFunc(s.ctx, func() { _ = nc.Close() })}
	c, err := s.cfg.open(nc, zmq4.Sub, server)
	if err == nil {
		z.c = c
		err = c.SendMsg(zmq4.NewMsg(append([]byte{1}, s.topic...)))
	}
	if err != nil {
		z.close()
		return zconn{}, err
	}
	return z, nil
}

// dial connects to endpoint, retrying until it answers or the Subscriber
// ends. The first connection's failed handshake is returned; a reconnection
// retries it.
func (s *Subscriber) dial(endpoint string, first bool) (zconn, error) {
	for {
		nc, err := dialEndpoint(s.ctx, endpoint)
		if errors.Is(err, ErrBadEndpoint) {
			return zconn{}, err
		}
		if err == nil {
			z, err := s.attach(nc, false /* server */)
			if err == nil || first {
				return z, err
			}
		}
		select {
		case <-s.ctx.Done():
			return zconn{}, errors.Join(s.ctx.Err(), err)
		case <-time.After(subscribeRetry):
		}
	}
}

// follow reads the publisher at endpoint, reconnecting whenever the
// connection ends, until the Subscriber ends.
func (s *Subscriber) follow(endpoint string, z zconn) {
	defer s.conns.Done()
	for {
		s.read(z)
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(subscribeRetry):
		}
		var err error
		if z, err = s.dial(endpoint, false /* first */); err != nil {
			return // the Subscriber ended
		}
	}
}

// accept reads every publisher that connects to a SubscribeListen socket,
// each on its own goroutine, until the Subscriber ends.
func (s *Subscriber) accept() {
	acceptEach(s.ctx, s.ln, &s.conns, func(nc net.Conn) {
		if z, err := s.attach(nc, true /* server */); err == nil {
			s.read(z)
		}
	})
}

// read hands z's messages to Recv until the connection fails or the
// Subscriber ends, then closes it; a message over the bound reaches Recv
// as its error.
func (s *Subscriber) read(z zconn) {
	defer z.close()
	for {
		msg, err := z.c.RecvMsg()
		switch {
		case errors.Is(err, ErrMessageTooBig):
			msg = zmq4.Msg{}
		case err != nil:
			return
		case msg.Type != zmq4.UsrMsg:
			continue
		}
		select {
		case s.msgs <- received{msg, err}:
		case <-s.ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// Recv returns the next message's topic and frame. It fails once the
// Subscriber is closed or its context ends, and with ErrMessageTooBig for a
// message over the bound (the connection it came on is closed; the next
// Recv reads on).
func (s *Subscriber) Recv() (string, Frame, error) {
	for {
		var r received
		select {
		case r = <-s.msgs:
		case <-s.ctx.Done():
			return "", Frame{}, fmt.Errorf("kvtier: events: subscriber closed: %w", s.ctx.Err())
		}
		if r.err != nil {
			return "", Frame{}, fmt.Errorf("kvtier: events: receiving: %w", r.err)
		}
		fr := r.msg.Frames
		if len(fr) != 3 || len(fr[1]) != 8 {
			return "", Frame{}, fmt.Errorf("%w: a message is [topic, seq, payload], got %d frames", ErrDecode, len(fr))
		}
		if !strings.HasPrefix(string(fr[0]), s.topic) {
			continue // a publisher that does not filter
		}
		return string(fr[0]), Frame{Seq: binary.BigEndian.Uint64(fr[1]), Payload: fr[2]}, nil
	}
}

// Close closes the Subscriber's connections (and listener) and returns
// once its goroutines have.
func (s *Subscriber) Close() error {
	s.cancel()
	s.conns.Wait()
	return nil
}

// Addr is the endpoint a SubscribeListen socket bound, port resolved, as
// a publisher connects to it: a wildcard host is reported as 127.0.0.1
// (see Server.Addrs). A Subscriber made by Subscribe binds nothing: "".
func (s *Subscriber) Addr() string {
	if s.ln == nil {
		return ""
	}
	return connectEndpoint(s.ln)
}

// Replay asks a replay endpoint for the batches numbered from on: none
// (and a nil error) when the server holds none from there. A server that
// could not answer makes it fail with a *ReplayError (ErrNoReplay); a
// message over the client's bound (DefaultMaxMessage, or WithMaxMessage's)
// with ErrMessageTooBig.
func Replay(ctx context.Context, endpoint string, from uint64, opts ...ClientOption) ([]Frame, error) {
	return ask(ctx, endpoint, seqBytes(from), opts)
}

// FetchSnapshot asks a replay endpoint for the publisher's snapshot: apply
// it with View.Reset, then the batches numbered after its Seq. A server
// that could not answer makes it fail with a *ReplayError (ErrNoReplay); a
// snapshot over the client's bound (DefaultMaxMessage, or
// WithMaxMessage's) with ErrMessageTooBig.
func FetchSnapshot(ctx context.Context, endpoint string, opts ...ClientOption) (Frame, error) {
	fs, err := ask(ctx, endpoint, []byte(SnapshotRequest), opts)
	if err != nil {
		return Frame{}, err
	}
	if len(fs) != 1 {
		return Frame{}, fmt.Errorf("%w: snapshot answered with %d batches", ErrNoReplay, len(fs))
	}
	return fs[0], nil
}

// The dials of a replay endpoint, as zmq4's DEALER made them: up to
// askDials, askRetry apart.
const (
	askDials = 11
	askRetry = 250 * time.Millisecond
)

// ask sends req on a DEALER connection to endpoint and reads the replies
// up to the end or failure marker.
func ask(ctx context.Context, endpoint string, req []byte, opts []ClientOption) ([]Frame, error) {
	cfg, err := newClientConfig(opts)
	if err != nil {
		return nil, err
	}
	var nc net.Conn
	for i := 0; ; i++ {
		if nc, err = dialEndpoint(ctx, endpoint); err == nil || errors.Is(err, ErrBadEndpoint) || ctx.Err() != nil || i+1 == askDials {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(askRetry):
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kvtier: events: dialing %q: %w", endpoint, err)
	}
	stop := context.AfterFunc(ctx, func() { _ = nc.Close() })
	defer stop()
	defer nc.Close()
	// ctx's error in place of the closed connection's, once it ended.
	cause := func(err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	c, err := cfg.open(nc, zmq4.Dealer, false /* server */)
	if err != nil {
		return nil, fmt.Errorf("kvtier: events: dialing %q: %w", endpoint, cause(err))
	}
	if err := c.SendMsg(zmq4.NewMsgFrom(nil, req)); err != nil {
		return nil, fmt.Errorf("kvtier: events: asking %q: %w", endpoint, cause(err))
	}
	var out []Frame
	for {
		msg, err := c.RecvMsg()
		if err != nil {
			return out, fmt.Errorf("kvtier: events: reading the answer of %q: %w", endpoint, cause(err))
		}
		if msg.Type != zmq4.UsrMsg {
			continue
		}
		fr := msg.Frames
		if len(fr) > 0 && len(fr[0]) == 0 {
			fr = fr[1:] // the delimiter
		}
		if len(fr) != 2 || len(fr[0]) != 8 {
			return out, fmt.Errorf("%w: a reply is [seq, payload], got %d frames", ErrDecode, len(fr))
		}
		if string(fr[0]) == string(endSeq) {
			if len(fr[1]) > 0 {
				return nil, parseFailure(fr[1])
			}
			return out, nil
		}
		out = append(out, Frame{Seq: binary.BigEndian.Uint64(fr[0]), Payload: fr[1]})
	}
}
