package stress

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// deadline arms a timer that, should t still run after the test deadline
// (testDeadline, or KVTIER_STRESS_DEADLINE_S seconds), ends the test binary
// with a panic naming t and a summary of every goroutine's stack: a hang
// fails by name, well within go test's own -timeout (10 minutes by default,
// which ends with no word of which test hung). The timer stops when t ends.
func deadline(t *testing.T) {
	t.Helper()
	t.Cleanup(armDeadline(t, t.Name(), time.Duration(envInt(t, "KVTIER_STRESS_DEADLINE_S", int(testDeadline/time.Second)))*time.Second))
}

// armDeadline arms deadline's timer for what (a test, or a phase of a long
// one) and returns the function that stops it. A panic, because t.Fatal may
// only be called from the test's goroutine, and that goroutine is the one
// hung.
func armDeadline(t *testing.T, what string, d time.Duration) (stop func()) {
	start := time.Now()
	timer := time.AfterFunc(d, func() {
		panic(fmt.Sprintf("stress: %s still running after %v (deadline %v): hung?\n%s",
			what, time.Since(start).Round(time.Second), d, goroutineSummary(allStacks())))
	})
	return func() { timer.Stop() }
}

// allStacks returns every goroutine's stack, as runtime.Stack formats them.
func allStacks() []byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true /* all */)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

// goroutineSummary groups the goroutines of a runtime.Stack dump by their
// wait state and their innermost frames (a kvtier frame first, when the
// stack has one), most numerous first: where everything waits, in a screen.
func goroutineSummary(dump []byte) string {
	type group struct {
		key string
		n   int
	}
	var groups []*group
	byKey := map[string]*group{}
	total := 0
	for g := range bytes.SplitSeq(dump, []byte("\n\n")) {
		lines := strings.Split(strings.TrimSpace(string(g)), "\n")
		if len(lines) < 2 || !strings.HasPrefix(lines[0], "goroutine ") {
			continue
		}
		total++
		state := lines[0]
		if i, j := strings.IndexByte(state, '['), strings.IndexByte(state, ']'); i >= 0 && j > i {
			state = state[i+1 : j]
			if k := strings.IndexByte(state, ','); k >= 0 { // drop ", 2 minutes"
				state = state[:k]
			}
		}
		// Function lines alternate with file:line lines.
		var frames []string
		for i := 1; i < len(lines); i += 2 {
			f := lines[i]
			if k := strings.LastIndexByte(f, '('); k > 0 {
				f = f[:k]
			}
			frames = append(frames, f)
		}
		top := frames[0]
		if k := slices.IndexFunc(frames, func(f string) bool { return strings.Contains(f, "kvtier/kvtier") }); k > 0 {
			top += " ... " + frames[k]
		}
		key := "[" + state + "] " + top
		if gr, ok := byKey[key]; ok {
			gr.n++
			continue
		}
		gr := &group{key: key, n: 1}
		byKey[key] = gr
		groups = append(groups, gr)
	}
	slices.SortStableFunc(groups, func(a, b *group) int { return b.n - a.n })
	var b strings.Builder
	fmt.Fprintf(&b, "%d goroutines:\n", total)
	for _, gr := range groups {
		fmt.Fprintf(&b, "%6d  %s\n", gr.n, gr.key)
	}
	return b.String()
}

// TestGoroutineSummary: the summary deadline prints counts goroutines by
// state and frame.
func TestGoroutineSummary(t *testing.T) {
	block := make(chan struct{})
	done := make(chan struct{})
	for range 3 {
		go func() {
			<-block
			done <- struct{}{}
		}()
	}
	defer func() {
		close(block)
		for range 3 {
			<-done
		}
	}()
	const want = "     3  [chan receive] github.com/kvtier/kvtier/stress.TestGoroutineSummary.func1\n"
	s := goroutineSummary(allStacks())
	for i := 0; !strings.Contains(s, want); i++ {
		if i == 10000 {
			t.Fatalf("the three goroutines waiting on a channel are not one line %q of the summary:\n%s", want, s)
		}
		runtime.Gosched() // until the three have parked
		s = goroutineSummary(allStacks())
	}
	if !strings.HasSuffix(strings.SplitN(s, "\n", 2)[0], " goroutines:") {
		t.Fatalf("summary without its header:\n%s", s)
	}
}
