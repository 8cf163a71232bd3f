// Package dashboard is ILB's web page for people: a sources × engine
// clusters heatmap of the weights of each model, the engine clusters' state
// and utilization over time, shedding, the recent decisions with a
// click-through to the explanation of each, and the history of weights
// versions.
//
// The page is plain HTML, CSS and JavaScript embedded in the binary (no
// build step, nothing fetched from elsewhere); it polls a small JSON API
// served next to it. [Dashboard.Handler] serves both under /ui/, and is
// meant to be mounted on the admin server's mux at "/ui/".
//
// The history (cluster state and utilization, shedding, weights versions)
// is kept in memory by [Dashboard.Run], a sampler that reads the
// components every Options.Interval into a bounded ring: it is lost on a
// restart and covers Options.Window. The version history holds the
// versions the sampler saw, one look per Interval: a version that was in
// force for less than that may be missing (`ilb why` and
// /debug/weights/history list every published version). Without Run the
// page still shows the weights in force, the current cluster state and the
// decisions; the charts stay empty and the history shows only the version
// in force.
//
// The dashboard only reads: it goes through small interfaces declared
// here ([Weights], [Decisions], [Signals]) and never changes a component.
package dashboard
