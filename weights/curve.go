package weights

import "github.com/ilbproject/ilb/config"

// clusterCurve is the utilization cost curve of one cluster, each band's
// UpTo in units of the cluster's Capacity (the throughput within the TTFT
// target). The bands up to the target utilization are the configured
// ones: they spread load by the capacity within the target. The bands
// above it price how close the cluster runs to saturation, and the
// shedding prices cut in among them (sheddable demand at the 90% band's
// end by default); they are scaled by Saturation ÷ Capacity when the
// cluster's saturation throughput is above its capacity, so that ILB
// sheds against what the engines can serve, not against the load at
// which a window's tail first missed the target. A cluster whose
// saturation throughput is unknown or not above its capacity keeps the
// configured curve (the result is then ix.curve itself: do not modify).
func (ix *index) clusterCurve(st ClusterState) []config.CostBand {
	if !(st.Capacity > 0) || !(st.Saturation > st.Capacity) {
		return ix.curve
	}
	r := st.Saturation / st.Capacity
	t := ix.c.Controller.TargetUtilization
	out := make([]config.CostBand, len(ix.curve))
	for i, b := range ix.curve {
		out[i] = b
		if b.UpTo > t {
			out[i].UpTo = b.UpTo * r
		}
	}
	return out
}

// curveEnd is where a curve's last band ends: the utilization past which
// load overflows.
func curveEnd(curve []config.CostBand) float64 {
	if len(curve) == 0 {
		return 1
	}
	return curve[len(curve)-1].UpTo
}
