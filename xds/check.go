package xds

import (
	"fmt"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// checkReferences is ILB's semantic check beyond Consistent(): every
// cluster a route names is a cluster of this source's CDS (so weights can
// never send a source's traffic to a cluster its residency forbids), and
// every weighted route has a positive total weight.
func (r *Resources) checkReferences() []error {
	known := map[string]bool{}
	for _, c := range r.Clusters {
		known[c.GetName()] = true
	}
	var errs []error
	for _, rc := range r.Routes {
		for _, vh := range rc.GetVirtualHosts() {
			for _, rt := range vh.GetRoutes() {
				errs = append(errs, checkRoute(rc.GetName(), rt, known)...)
			}
		}
	}
	return errs
}

func checkRoute(rcName string, rt *routev3.Route, known map[string]bool) []error {
	a := rt.GetRoute()
	if a == nil {
		return nil
	}
	where := fmt.Sprintf("route configuration %q route %q", rcName, rt.GetName())
	var errs []error
	if name := a.GetCluster(); name != "" && !known[name] {
		errs = append(errs, fmt.Errorf("%s: cluster %q is not in this source's clusters", where, name))
	}
	if wc := a.GetWeightedClusters(); wc != nil {
		var total uint64
		for _, cw := range wc.GetClusters() {
			if !known[cw.GetName()] {
				errs = append(errs, fmt.Errorf("%s: weighted cluster %q is not in this source's clusters", where, cw.GetName()))
			}
			total += uint64(cw.GetWeight().GetValue())
		}
		if total == 0 {
			errs = append(errs, fmt.Errorf("%s: weights sum to 0", where))
		}
	}
	return errs
}
