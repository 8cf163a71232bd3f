// Package tenant makes shedding fair between the tenants of a priority.
//
// The controller plans a shed fraction per (source, model) cell and
// priority, and route.Decide applies it to a request when the engines
// confirm the overload. Without tenants, that fraction falls on every
// request alike, so one tenant's flood takes the others of its priority
// down with it. A Table, one per cell, keeps each tenant's recent demand
// and spreads the cell's fraction over the tenants by weighted max-min
// fairness: a tenant asking for no more than its fair share of what the
// cell serves is not shed; the others are shed down to a common level,
// scaled by their weights. A tenant above that level within the noise of
// its demand estimate (a few seconds' count of arrivals) is served whole
// when others ask above it beyond theirs: those give up what that takes.
// The total shed is the plan's.
//
// ext_proc and the routing benchmark (sim/experiment) share the Table:
// the benchmark's ILB is the product's.
package tenant
