// Package decision holds ILB's decision records and their log: what ILB
// saw of a request, what it decided and why (the clusters it could go
// to, the draw, the exclusions and steering, the replica picked and the
// demand booked), and what Envoy really did (from the response).
//
// ext_proc writes them; the admin API, the dashboard, `ilb explain` and
// OpenTelemetry read them. A Log keeps the most recent records within a
// count and a byte budget; a stored Record is immutable (updates are
// copies: Log.Update), readers get copies and never block the request
// path, and subscribers get each record once, when it completes.
package decision
