// Package controller is ILB's slow loop: every controller.tick (and at
// once when a cluster's serving replicas change) it gathers the cluster
// states and the demand, checks them (a blind monitor, stale or invalid
// demand hold the last good version: guard.go), smooths the demand, runs
// the configured weights.Policy and publishes each new version to its
// sinks — the xDS server, the ext_proc service, the history and the
// metrics — in order, keeping the last good version when a sink rejects
// a new one.
//
// It also keeps the recent versions and their differences (History,
// Diff) for the dashboard and `ilb weights`, and reads demand files
// (ParseDemandFile) for `ilb weights --demand-file`. A Controller is safe
// for concurrent use; Run owns its goroutine and stops on ctx.Done().
package controller
