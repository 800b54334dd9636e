// Package promserve serves kvtier's Prometheus metrics for the commands'
// -metrics-addr flag.
package promserve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// A Sink serves /metrics: the live registry the running Manager registers
// on (its series labelled config=<name>), plus the final values of the
// Managers already closed, frozen just before they closed (Close
// unregisters a Manager's series).
type Sink struct {
	reg    *prometheus.Registry
	frozen atomic.Pointer[[]*dto.MetricFamily]
	srv    *http.Server
	Addr   string
}

// Start listens on addr and serves /metrics.
func Start(addr string) (*Sink, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-metrics-addr: %w", err)
	}
	s := &Sink{reg: prometheus.NewRegistry(), Addr: ln.Addr().String()}
	mux := http.NewServeMux()
	// Between a Freeze and the Close after it a series is both live and
	// frozen: serve it once rather than fail the scrape.
	mux.Handle("/metrics", promhttp.HandlerFor(prometheus.Gatherers{s.reg, prometheus.GathererFunc(s.gatherFrozen)}, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Registerer is where configuration name's Manager registers.
func (s *Sink) Registerer(name string) prometheus.Registerer {
	return prometheus.WrapRegistererWith(prometheus.Labels{"config": name}, s.reg)
}

// Freeze keeps the live series' current values, to serve after their
// Manager closed (which unregisters them).
func (s *Sink) Freeze() error {
	fams, err := s.reg.Gather()
	if err != nil {
		return err
	}
	var all []*dto.MetricFamily
	if old := s.frozen.Load(); old != nil {
		all = append(all, *old...)
	}
	all = append(all, fams...)
	s.frozen.Store(&all)
	return nil
}

func (s *Sink) gatherFrozen() ([]*dto.MetricFamily, error) {
	if f := s.frozen.Load(); f != nil {
		return *f, nil
	}
	return nil, nil
}

// Hold serves until ctx ends, then stops the server.
func (s *Sink) Hold(ctx context.Context, w io.Writer) error {
	fmt.Fprintf(w, "metrics: serving the final values on http://%s/metrics until interrupted\n", s.Addr)
	<-ctx.Done()
	return s.Close()
}

// Close stops the server.
func (s *Sink) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
