package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/kvtier/kvtier/scheduler"
)

// progressBar draws one line on a terminal, redrawn in place, at most every
// 100 ms of wall time.
type progressBar struct {
	w     io.Writer
	label string
	last  time.Time
	drawn bool
}

// isTerminal reports whether f is a character device (a terminal, not a pipe
// or file), so that CI logs get no progress bar.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (p *progressBar) update(pr scheduler.Progress) {
	now := time.Now()
	if pr.Finished < pr.Total && now.Sub(p.last) < 100*time.Millisecond {
		return
	}
	p.last = now
	const width = 30
	done := 0
	if pr.Total > 0 {
		done = width * pr.Finished / pr.Total
	}
	fmt.Fprintf(p.w, "\r%-16s [%s%s] %6d/%d requests, modelled time %7.1f s, %d steps",
		p.label, strings.Repeat("#", done), strings.Repeat(".", width-done), pr.Finished, pr.Total, pr.Now.Seconds(), pr.Steps)
	p.drawn = true
}

// finish ends the bar's line.
func (p *progressBar) finish() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}
