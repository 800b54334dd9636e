package main

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/internal/promserve"
)

// metricsSink hands the Managers the suites create to -metrics-addr's
// server. The zero value (no -metrics-addr) registers nothing.
type metricsSink struct{ s *promserve.Sink }

// registerer is the Registerer for the Manager of configuration name (its
// series labelled config=name), nil without -metrics-addr.
func (x metricsSink) registerer(name string) prometheus.Registerer {
	if x.s == nil {
		return nil
	}
	return x.s.Registerer(name)
}

// close keeps m's final values on the server (Close unregisters them), then
// closes m.
func (x metricsSink) close(ctx context.Context, m *kvtier.Manager) error {
	var err error
	if x.s != nil {
		err = x.s.Freeze()
	}
	return errors.Join(err, m.Close(ctx))
}
