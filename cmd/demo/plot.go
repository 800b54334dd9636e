package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/kvtier/kvtier/scheduler"
)

// writePlot draws, side by side, the TTFT distribution (a CDF on a log time
// axis) and the hit ratio over the run's modelled time of every configuration, and writes
// it to path as PNG or SVG by its extension.
func writePlot(path string, outs []outcome) (err error) {
	format, err := plotFormat(path)
	if err != nil {
		return fmt.Errorf("-plot: %w", err)
	}
	cdf := plot.New()
	cdf.Title.Text = "Time to first token"
	cdf.X.Label.Text = "TTFT (s, log scale)"
	cdf.Y.Label.Text = "fraction of requests"
	cdf.X.Scale = plot.LogScale{}
	cdf.X.Tick.Marker = plot.LogTicks{Prec: -1}
	cdf.Y.Min, cdf.Y.Max = 0, 1
	cdf.Legend.Top, cdf.Legend.Left = true, true
	cdf.Add(plotter.NewGrid())

	hits := plot.New()
	hits.Title.Text = "Prefix hit ratio over time (cumulative)"
	hits.X.Label.Text = "run time (s)"
	hits.Y.Label.Text = "share of prompt tokens hit (first admissions)"
	hits.Y.Min = 0
	hits.Legend.Top, hits.Legend.Left = true, true
	hits.Add(plotter.NewGrid())

	for i, out := range outs {
		style := func(l *plotter.Line) {
			l.Color = plotutil.Color(i)
			l.Width = vg.Points(1.5)
			l.Dashes = plotutil.Dashes(i)
		}
		if pts := cdfPoints(out.ttfts); len(pts) > 0 {
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.StepStyle = plotter.PostStep
			style(l)
			cdf.Add(l)
			cdf.Legend.Add(out.tiers.String(), l)
		}
		if pts := cumulativeHits(out.res.Series, out.res.SeriesInterval); len(pts) > 0 {
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			style(l)
			hits.Add(l)
			hits.Legend.Add(out.tiers.String(), l)
		}
	}

	logRange(&cdf.X)
	if !(hits.Y.Max > hits.Y.Min) { // no hit anywhere: a 0 to 1 axis, not -1 to 1
		hits.Y.Min, hits.Y.Max = 0, 1
	}

	const width, height = 28 * vg.Centimeter, 11 * vg.Centimeter
	c, err := draw.NewFormattedCanvas(width, height, format)
	if err != nil {
		return err
	}
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Centimeter, PadTop: vg.Millimeter * 3, PadBottom: vg.Millimeter * 3,
		PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 5}
	plots := [][]*plot.Plot{{cdf, hits}}
	canvases := plot.Align(plots, tiles, draw.New(c))
	cdf.Draw(canvases[0][0])
	hits.Draw(canvases[0][1])

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	_, err = c.WriteTo(f)
	return err
}

// logRange gives a log axis a range with a positive minimum below its
// maximum. Every TTFT equal (a trace of one request, or of requests that
// arrive together) leaves Min == Max, which gonum pads by ±1 to a negative
// minimum and a panic on the log scale; no TTFT at all leaves no range.
func logRange(a *plot.Axis) {
	if a.Min >= a.Max || !(a.Min > 0) {
		if a.Min > 0 && !math.IsInf(a.Min, 0) {
			a.Min, a.Max = a.Min/10, a.Max*10 // a decade each side: ticks to read it by
		} else {
			a.Min, a.Max = 1e-3, 1
		}
	}
}

// plotFormat is the image format a -plot path asks for by its extension:
// png or svg, in any case.
func plotFormat(path string) (string, error) {
	format := strings.ToLower(strings.TrimPrefix(filepath.Ext(path), "."))
	if format != "png" && format != "svg" {
		return "", fmt.Errorf("%s: the name must end in .png or .svg", path)
	}
	return format, nil
}

// cumulativeHits is the hit ratio of the first admissions resolved up to the
// end of each series interval, as the table counts it (readmissions apart).
func cumulativeHits(series []scheduler.SeriesPoint, interval time.Duration) plotter.XYs {
	var pts plotter.XYs
	var admitted, hit int64
	for _, p := range series {
		admitted += p.AdmittedTokens - p.ReadmittedTokens
		hit += p.HitTokens - p.ReadmittedHitTokens
		if admitted > 0 {
			pts = append(pts, plotter.XY{X: (p.Start + interval).Seconds(), Y: float64(hit) / float64(admitted)})
		}
	}
	return pts
}

// cdfPoints is the empirical CDF of ds in seconds, one point per distinct
// value, at most about 2,000 points.
func cdfPoints(ds []time.Duration) plotter.XYs {
	if len(ds) == 0 {
		return nil
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	step := max(1, len(s)/2000)
	// The CDF is 0 below the first value: the step up to the first point
	// is drawn (a single distinct value would draw nothing).
	pts := plotter.XYs{{X: max(s[0].Seconds(), 1e-6), Y: 0}}
	for i := 0; i < len(s); i++ {
		last := i == len(s)-1
		if !last && (s[i+1] == s[i] || (i%step != 0)) {
			continue
		}
		x := max(s[i].Seconds(), 1e-6) // the log axis needs x > 0
		pts = append(pts, plotter.XY{X: x, Y: float64(i+1) / float64(len(s))})
	}
	return pts
}
