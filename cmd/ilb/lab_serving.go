//go:build serving

package main

// labCommands: the serving binary has no simulation commands (build
// without -tags serving for demo, sim, engine, ha-demo, bench-xds and envoysim).
func labCommands() []command { return nil }
