package experiment

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// ttftFloor is the lowest TTFT a plot shows (its axis is logarithmic).
const ttftFloor = 0.05

// Plot writes the time series of results (one scenario, several
// policies) into dir as format ("png" or "svg") files:
//
//	<scenario>-ttft.<format>         TTFT p99 per source over time, one panel per policy (log scale, SLO dashed)
//	<scenario>-utilization.<format>  each cluster's utilization over time, one panel per policy
//	<scenario>-weights.<format>      ILB's weights: each source's share per region over time, one panel per source
//
// It returns the paths written.
func Plot(dir, format string, results []*Result) ([]string, error) {
	if format != "png" && format != "svg" {
		return nil, fmt.Errorf("plot: format %q: want png or svg", format)
	}
	if len(results) == 0 {
		return nil, errors.New("plot: no results")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plot: %w", err)
	}
	name := results[0].Scenario
	var paths []string
	write := func(kind string, panels []*plot.Plot) error {
		path := filepath.Join(dir, fmt.Sprintf("%s-%s.%s", name, kind, format))
		if err := savePanels(path, format, panels); err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		paths = append(paths, path)
		return nil
	}
	var ttft, util []*plot.Plot
	for _, r := range results {
		p, err := linesPlot(fmt.Sprintf("%s, %s: TTFT p99 per source", name, r.Policy), "seconds (log)", r.Series.Times, r.Series.Sources, floored(r.Series.TTFTp99))
		if err != nil {
			return nil, err
		}
		logScale(p, r.SLO)
		ttft = append(ttft, p)
		if p, err = linesPlot(fmt.Sprintf("%s, %s: cluster utilization", name, r.Policy), "of capacity", r.Series.Times, r.Series.Clusters, r.Series.Utilization); err != nil {
			return nil, err
		}
		util = append(util, p)
	}
	if err := write("ttft", ttft); err != nil {
		return nil, err
	}
	if err := write("utilization", util); err != nil {
		return nil, err
	}
	for _, r := range results {
		if r.Policy != "ilb" || len(r.Series.Weights) == 0 {
			continue
		}
		var panels []*plot.Plot
		for si, src := range r.Series.Sources {
			p, err := linesPlot(fmt.Sprintf("%s, ilb: weights of %s per region", name, src), "share", r.Series.Times, r.Series.Regions, r.Series.Weights[si])
			if err != nil {
				return nil, err
			}
			p.Y.Min, p.Y.Max = 0, 1
			panels = append(panels, p)
		}
		if err := write("weights", panels); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// linesPlot draws one line per series over times, in seconds.
func linesPlot(title, ylabel string, times []float64, names []string, series [][]float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	p.Legend.Left = true
	for si, ys := range series {
		pts := make(plotter.XYs, len(ys))
		for i, y := range ys {
			pts[i].X, pts[i].Y = times[i], y
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, fmt.Errorf("plot %s: %w", title, err)
		}
		l.Color = plotutil.Color(si)
		l.Dashes = plotutil.Dashes(si / 7)
		l.Width = vg.Points(1)
		p.Add(l)
		p.Legend.Add(names[si], l)
	}
	p.Add(plotter.NewGrid())
	return p, nil
}

// logScale makes p's Y axis logarithmic from ttftFloor (see floored) and
// draws the SLO as a dashed line.
func logScale(p *plot.Plot, slo float64) {
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min = ttftFloor
	p.Y.Max = math.Max(p.Y.Max, 10*slo)
	if slo > 0 {
		xmin, xmax := p.X.Min, p.X.Max
		l, err := plotter.NewLine(plotter.XYs{{X: xmin, Y: slo}, {X: xmax, Y: slo}})
		if err == nil {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
			p.Add(l)
			p.Legend.Add("SLO", l)
		}
	}
}

// savePanels writes the plots one above the other into path.
func savePanels(path, format string, panels []*plot.Plot) error {
	const w, h = 10 * vg.Inch, 3 * vg.Inch
	height := h * vg.Length(len(panels))
	var c vg.CanvasWriterTo
	switch format {
	case "svg":
		c = vgsvg.New(w, height)
	default:
		c = vgimg.PngCanvas{Canvas: vgimg.New(w, height)}
	}
	grid := make([][]*plot.Plot, len(panels))
	for i, p := range panels {
		grid[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter, PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	canvases := plot.Align(grid, tiles, draw.New(c))
	for i, p := range panels {
		p.Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// floored is a copy of series with every value at least ttftFloor, for a
// logarithmic axis.
func floored(series [][]float64) [][]float64 {
	out := make([][]float64, len(series))
	for i, ys := range series {
		out[i] = make([]float64, len(ys))
		for j, y := range ys {
			out[i][j] = math.Max(y, ttftFloor)
		}
	}
	return out
}
