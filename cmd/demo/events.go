package main

import (
	"strconv"
	"strings"

	"github.com/kvtier/kvtier"
)

// eventsConfig is replica i's KV-event publisher for -events (nil without
// it): its endpoints' ports offset by i, as vLLM offsets them by
// data-parallel rank, and the topic llm-d's indexer parses.
func eventsConfig(o options, i int) *kvtier.EventsConfig {
	if o.events == "" {
		return nil
	}
	c := &kvtier.EventsConfig{Endpoint: offsetPort(o.events, i), Topic: "kv@kvtier-demo-" + strconv.Itoa(i) + "@kvtier-demo-model"}
	if o.eventsReply != "" {
		c.ReplayEndpoint = offsetPort(o.eventsReply, i)
	}
	return c
}

// offsetPort gives replica i an endpoint of its own: it adds i to the
// port at the end of a tcp:// endpoint (port 0, which picks a free port,
// is left alone) and appends _dp<i> to others (an ipc:// path), as vLLM
// does to an endpoint it cannot offset by data-parallel rank. Replica 0
// keeps ep.
func offsetPort(ep string, i int) string {
	if i == 0 {
		return ep
	}
	if !strings.HasPrefix(ep, "tcp://") {
		return ep + "_dp" + strconv.Itoa(i)
	}
	k := strings.LastIndexByte(ep, ':')
	port, err := strconv.Atoi(ep[k+1:])
	if err != nil || port == 0 {
		return ep
	}
	return ep[:k+1] + strconv.Itoa(port+i)
}
