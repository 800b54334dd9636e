package events

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"
)

// The PUB end of the stream is written here over zmq4's ZMTP connections
// (zmq4.Open) rather than taken from zmq4.NewPub. zmq4's PUB socket puts
// every message on one unbounded queue whose single writer goroutine
// writes it to each subscriber in turn: one subscriber that stops reading
// blocks that write, and with it every other subscriber, for good, while
// the queue grows without bound (and Publish never reports a drop); its
// Close also closes the connections while that queue still holds batches.
// Here, as libzmq gives each pipe its own high-water mark, every
// subscriber has its own queue of up to SubscriberQueue batches (a ring
// that starts small and doubles as batches wait: frame_queue.go) and its
// own writer: a slow subscriber loses its own batches (SubscriberDrops; it sees
// a gap) and delays no other, and Close lets every writer empty its queue
// for up to Linger.
//
// Server.send owns the set of subscribers and their topics; each
// connection's reader and writer, and the accept or dial loop, talk to it
// by channel. A connection's writer is the only goroutine that writes to
// it: its reader hands it the PONG a subscriber's PING asks for (libzmq
// sends PINGs with ZMQ_HEARTBEAT_IVL), as ZMTP frames from two writers
// interleave.

// pubConn is one subscriber's connection.
type pubConn struct {
	c     *zmq4.Conn
	out   *frameQueue   // its queue; closed by Server.send
	pong  chan []byte   // a PING's context, for the writer to answer
	wrote chan struct{} // closed when its writer returned
}

// pubTopic is a subscription (on) or its cancellation from one connection.
type pubTopic struct {
	c     *pubConn
	topic string
	on    bool
}

// listenEndpoint binds the endpoint ep, tcp:// ("*" for every address)
// or ipc://.
func listenEndpoint(ep string) (net.Listener, error) {
	network, addr, ok := strings.Cut(listenAddr(ep), "://")
	switch {
	case ok && network == "tcp":
	case ok && network == "ipc":
		network = "unix"
	default:
		return nil, fmt.Errorf("%w: want tcp:// or ipc://", ErrBadEndpoint)
	}
	ln, err := net.Listen(network, addr)
	if err != nil && badAddress(err) {
		return nil, fmt.Errorf("%w: %w", ErrBadEndpoint, err)
	}
	return ln, err
}

// badAddress reports whether err, from net.Listen or a dial, says the
// address does not parse or resolve, rather than that it is busy or
// unreachable.
func badAddress(err error) bool {
	var ae *net.AddrError
	var de *net.DNSError
	return errors.As(err, &ae) || (errors.As(err, &de) && de.IsNotFound)
}

// checkConnectEndpoint refuses a PUB endpoint that connects (a named host)
// but names no host and numeric port, tcp://host:port, or port 0, which no
// one listens on. Listen dials it in
// the background, retrying: without this an endpoint that can never work
// would retry for ever.
func checkConnectEndpoint(ep string) error {
	hostPort, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return fmt.Errorf("%w: want tcp:// or ipc://", ErrBadEndpoint)
	}
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadEndpoint, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if host == "" || err != nil {
		return fmt.Errorf("%w: want tcp://host:port, with a numeric port", ErrBadEndpoint)
	}
	if n == 0 {
		return fmt.Errorf("%w: port 0 with a named host: the PUB socket connects there (vLLM's rule) and no one listens on port 0; to bind a free port, use a wildcard host (tcp://*:0)", ErrBadEndpoint)
	}
	return nil
}

// connectEndpoint is the endpoint a client connects to for what ln bound:
// a wildcard host (tcp://*, 0.0.0.0 or [::]; Go reports each as [::])
// becomes 127.0.0.1, as libzmq cannot connect to [::] without ZMQ_IPV6
// (and Go's wildcard socket takes IPv4 too); a named host, and an ipc://
// path, stay as bound.
func connectEndpoint(ln net.Listener) string {
	switch a := ln.Addr().(type) {
	case *net.TCPAddr:
		if a.IP.IsUnspecified() {
			return "tcp://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(a.Port))
		}
		return "tcp://" + a.String()
	case *net.UnixAddr:
		return "ipc://" + a.Name
	default:
		return a.Network() + "://" + a.String()
	}
}

// accept serves every connection made to the bound PUB socket.
func (s *Server) accept() {
	defer s.conns.Done()
	acceptEach(s.ctx, s.ln, &s.conns, func(nc net.Conn) { s.serveConn(nc, true /* server */) })
}

// acceptEach runs serve for every connection ln accepts, each on its own
// goroutine counted in conns, until ctx ends (whoever ends ctx closes ln).
// A passing failure to accept (out of file descriptors) waits a little.
func acceptEach(ctx context.Context, ln net.Listener, conns *sync.WaitGroup, serve func(net.Conn)) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		conns.Add(1)
		go func() {
			defer conns.Done()
			serve(nc)
		}()
	}
}

// dial connects the PUB socket to a subscriber that binds, and connects
// again whenever the connection ends, until Close.
func (s *Server) dial(addr string) {
	defer s.conns.Done()
	var d net.Dialer
	for {
		if nc, err := d.DialContext(s.ctx, "tcp", addr); err == nil {
			s.serveConn(nc, false /* server */)
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// serveConn runs one subscriber's connection until it ends or Close ends
// it: the handshake, then a writer for its queue while this goroutine
// reads its subscriptions.
func (s *Server) serveConn(nc net.Conn, server bool) {
	stop := context.AfterFunc(s.ctx, func() { _ = nc.Close() })
	defer stop()
	defer nc.Close()
	g := newGuardConn(nc)
	c, err := timedHandshake(g, zmq4.Pub, nil, server)
	if err != nil {
		return
	}
	pc := &pubConn{c: c, out: newFrameQueue(s.cfg.SubscriberQueue), pong: make(chan []byte, 1), wrote: make(chan struct{})}
	select {
	case s.join <- pc:
	case <-s.ctx.Done():
		return
	}
	go s.write(pc)
	for {
		// Not c.RecvMsg: it answers a PING with a PONG written from this
		// goroutine, which lands between the frames, or between a frame's
		// header and body, that the writer is sending: the subscriber read
		// a PONG as a batch's payload, or lost the stream. Here the writer
		// sends the PONG.
		msg, err := readMsg(g)
		if err != nil {
			break
		}
		if ctx, ok := ping(msg); ok {
			select {
			case pc.pong <- ctx:
			default: // a PONG is already due: one answers both
			}
			continue
		}
		if topic, on, ok := subscription(msg); ok {
			select {
			case s.topics <- pubTopic{pc, topic, on}:
			case <-s.ctx.Done():
			}
		}
	}
	_ = nc.Close() // the writer's next write fails
	select {
	case s.leave <- pc: // send closes pc.out
	case <-s.ctx.Done(): // send has returned, and closed pc.out
	}
	<-pc.wrote
}

// write sends pc's queue, and the PONGs its reader asks for, until send
// closes the queue or a write fails. It is the connection's only writer.
func (s *Server) write(pc *pubConn) {
	defer close(pc.wrote)
	topic := []byte(s.cfg.Topic)
	for {
		var err error
		f, ok, closed := pc.out.pop()
		switch {
		case ok:
			select { // a PONG due goes first, as it would have in a select
			case ctx := <-pc.pong:
				err = pc.c.SendCmd(zmq4.CmdPong, ctx)
			default:
			}
			if err == nil {
				err = pc.c.SendMsg(zmq4.NewMsgFrom(topic, seqBytes(f.Seq), f.Payload))
			}
		case closed:
			return
		default:
			select {
			case <-pc.out.ready:
			case ctx := <-pc.pong:
				err = pc.c.SendCmd(zmq4.CmdPong, ctx)
			}
		}
		if err != nil {
			_ = pc.c.Close() // the reader sees it and leaves
			return
		}
	}
}

// readMsg reads one ZMTP message, user message or command, from g (whose
// reads fail before a message over its limit is allocated).
func readMsg(g *guardConn) (zmq4.Msg, error) {
	var msg zmq4.Msg
	var hdr [9]byte
	for more := true; more; {
		if _, err := io.ReadFull(g, hdr[:2]); err != nil {
			return msg, err
		}
		flags, size := hdr[0], uint64(hdr[1])
		more = flags&0x01 != 0
		if flags&0x04 != 0 {
			msg.Type = zmq4.CmdMsg
		}
		if flags&0x02 != 0 {
			if _, err := io.ReadFull(g, hdr[2:9]); err != nil {
				return msg, err
			}
			size = binary.BigEndian.Uint64(hdr[1:9])
		}
		body := make([]byte, size)
		if _, err := io.ReadFull(g, body); err != nil {
			return msg, err
		}
		msg.Frames = append(msg.Frames, body)
	}
	return msg, nil
}

// ping reads a PING command (ZMTP 3.1: a 2-byte TTL, then a context of up
// to 16 bytes that the PONG returns).
func ping(msg zmq4.Msg) (ctx []byte, ok bool) {
	if msg.Type != zmq4.CmdMsg || len(msg.Frames) != 1 {
		return nil, false
	}
	b := msg.Frames[0]
	if len(b) < 1+len(zmq4.CmdPing) || int(b[0]) != len(zmq4.CmdPing) || string(b[1:1+len(zmq4.CmdPing)]) != zmq4.CmdPing {
		return nil, false
	}
	b = b[1+len(zmq4.CmdPing):]
	if len(b) < 2 {
		return nil, true
	}
	return b[2:min(len(b), 2+16)], true
}

// subscription reads a SUB socket's (un)subscribe message: one frame, 1
// (subscribe) or 0 (cancel) followed by the topic prefix.
func subscription(msg zmq4.Msg) (topic string, on, ok bool) {
	if msg.Type != zmq4.UsrMsg || len(msg.Frames) != 1 || len(msg.Frames[0]) == 0 || msg.Frames[0][0] > 1 {
		return "", false, false
	}
	return string(msg.Frames[0][1:]), msg.Frames[0][0] == 1, true
}

// wants reports whether a subscriber to the prefixes in topics gets topic.
func wants(topics map[string]bool, topic string) bool {
	for k := range topics {
		if strings.HasPrefix(topic, k) {
			return true
		}
	}
	return false
}

// handshakeTimeout bounds a connection's ZMTP handshake (greeting and
// READY), as libzmq's ZMQ_HANDSHAKE_IVL does (30 s by default), on every
// end: the server's PUB and replay ends, where a peer that connects and
// completes none would otherwise hold the connection's goroutine and
// descriptor for as long as it liked, and the consumer's (Subscribe,
// SubscribeListen, Replay, FetchSnapshot), where a publisher or replay
// server that accepts and never greets would stall the connection until
// the caller's context ended. A variable so that tests can shorten it.
var handshakeTimeout = 30 * time.Second

// timedHandshake runs the handshake of a connection (openZMTP) within
// handshakeTimeout; past it the read fails (os.ErrDeadlineExceeded) and
// the caller drops the connection.
func timedHandshake(g *guardConn, typ zmq4.SocketType, id zmq4.SocketIdentity, server bool) (*zmq4.Conn, error) {
	if err := g.SetDeadline(time.Now().Add(handshakeTimeout)); err != nil {
		return nil, fmt.Errorf("kvtier: events: handshake deadline: %w", err)
	}
	c, err := openZMTP(g, typ, id, server)
	if err != nil {
		return nil, err
	}
	if err := g.SetDeadline(time.Time{}); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("kvtier: events: handshake deadline: %w", err)
	}
	return c, nil
}

// maxInbound bounds one message a peer sends the PUB or replay end, all
// its frames together: a handshake command, a subscription or a replay
// request, each far smaller. zmq4 allocates a frame's body at the size
// its header claims before reading it, so without this bound one 9-byte
// frame header claiming 2^62 bytes from anyone who can connect crashed
// the process (makeslice: len out of range), and a claim of some
// gigabytes exhausted its memory.
const maxInbound = 64 << 10

// errInboundTooBig ends a connection whose peer sent a message over
// maxInbound.
var errInboundTooBig = errors.New("kvtier: events: a peer's message exceeds 64 KiB")

// guardConn is a net.Conn for zmq4.Open whose reads fail as soon as the
// peer's ZMTP stream declares a message over its limit (maxInbound for
// the server's ends; the consumer's, see WithMaxMessage), before zmq4 has
// the frame's size. It follows the stream: the 64-byte greeting, then
// frames of a flags byte (0x01 more, 0x02 long size), a 1- or 8-byte
// size and the body.
type guardConn struct {
	net.Conn
	limit    uint64  // bytes one message may hold, all its frames together
	tooBig   error   // what the read fails with past limit
	greeting int     // greeting bytes still to pass
	hdr      [9]byte // the current frame's header so far
	nhdr     int
	body     uint64 // body bytes of the current frame still to pass
	msg      uint64 // bytes of the current message's frames so far
}

func newGuardConn(nc net.Conn) *guardConn { return newLimitedConn(nc, maxInbound, errInboundTooBig) }

// newLimitedConn returns a guardConn whose reads fail with tooBig at a
// message over limit bytes.
func newLimitedConn(nc net.Conn, limit uint64, tooBig error) *guardConn {
	return &guardConn{Conn: nc, limit: limit, tooBig: tooBig, greeting: 64}
}

func (g *guardConn) Read(p []byte) (int, error) {
	n, err := g.Conn.Read(p)
	if serr := g.scan(p[:n]); serr != nil {
		return 0, serr
	}
	return n, err
}

// scan follows the bytes b read from the peer.
func (g *guardConn) scan(b []byte) error {
	for len(b) > 0 {
		switch {
		case g.greeting > 0:
			k := min(g.greeting, len(b))
			g.greeting -= k
			b = b[k:]
		case g.body > 0:
			k := min(g.body, uint64(len(b)))
			g.body -= k
			b = b[k:]
		default: // a header byte
			g.hdr[g.nhdr] = b[0]
			g.nhdr++
			b = b[1:]
			flags, need := g.hdr[0], 2
			if flags&0x02 != 0 {
				need = 9
			}
			if g.nhdr < need {
				continue
			}
			size := uint64(g.hdr[1])
			if need == 9 {
				size = binary.BigEndian.Uint64(g.hdr[1:9])
			}
			g.nhdr = 0
			if size > g.limit-g.msg {
				return g.tooBig
			}
			g.msg += size
			if flags&0x01 == 0 { // the message's last frame
				g.msg = 0
			}
			g.body = size
		}
	}
	return nil
}
