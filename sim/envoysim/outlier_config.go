package envoysim

import (
	"errors"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// outlierConfig is a compiled OutlierDetection with Envoy's defaults
// (source/common/upstream/outlier_detection_impl.h DetectorConfig).
type outlierConfig struct {
	interval                    time.Duration // 10 s
	baseEjectionTime            time.Duration // 30 s
	maxEjectionTime             time.Duration // max(300 s, base_ejection_time)
	maxEjectionTimeJitter       time.Duration // 0
	consecutive5xx              uint64        // 5
	consecutiveGatewayFailure   uint64        // 5
	maxEjectionPercent          uint64        // 10
	enforcingConsecutive5xx     uint64        // 100
	enforcingGatewayFailure     uint64        // 0
	enforcingSuccessRate        uint64        // 100
	successRateMinimumHosts     uint64        // 5
	successRateRequestVolume    uint64        // 100
	successRateStdevFactor      uint64        // 1900 (÷1000)
	enforcingFailurePercentage  uint64        // 0
	failurePercentageThreshold  uint64        // 85
	failurePercentageMinHosts   uint64        // 5
	failurePercentageReqVolume  uint64        // 50
	alwaysEjectOneHost          bool          // false
	successfulActiveHCUnejectHC bool          // true
}

func compileOutlier(cc *clusterConfig, od *clusterv3.OutlierDetection) error {
	if od == nil {
		return nil
	}
	u := func(v *wrapperspb.UInt32Value, def uint64) uint64 {
		if v == nil {
			return def
		}
		return uint64(v.GetValue())
	}
	c := &outlierConfig{
		interval:                    durationOr(od.GetInterval(), 10*time.Second),
		baseEjectionTime:            durationOr(od.GetBaseEjectionTime(), 30*time.Second),
		maxEjectionTimeJitter:       durationOr(od.GetMaxEjectionTimeJitter(), 0),
		consecutive5xx:              u(od.GetConsecutive_5Xx(), 5),
		consecutiveGatewayFailure:   u(od.GetConsecutiveGatewayFailure(), 5),
		maxEjectionPercent:          min(100, u(od.GetMaxEjectionPercent(), 10)),
		enforcingConsecutive5xx:     u(od.GetEnforcingConsecutive_5Xx(), 100),
		enforcingGatewayFailure:     u(od.GetEnforcingConsecutiveGatewayFailure(), 0),
		enforcingSuccessRate:        u(od.GetEnforcingSuccessRate(), 100),
		successRateMinimumHosts:     u(od.GetSuccessRateMinimumHosts(), 5),
		successRateRequestVolume:    u(od.GetSuccessRateRequestVolume(), 100),
		successRateStdevFactor:      u(od.GetSuccessRateStdevFactor(), 1900),
		enforcingFailurePercentage:  u(od.GetEnforcingFailurePercentage(), 0),
		failurePercentageThreshold:  u(od.GetFailurePercentageThreshold(), 85),
		failurePercentageMinHosts:   u(od.GetFailurePercentageMinimumHosts(), 5),
		failurePercentageReqVolume:  u(od.GetFailurePercentageRequestVolume(), 50),
		alwaysEjectOneHost:          od.GetAlwaysEjectOneHost().GetValue(),
		successfulActiveHCUnejectHC: od.GetSuccessfulActiveHealthCheckUnejectHost() == nil || od.GetSuccessfulActiveHealthCheckUnejectHost().GetValue(),
	}
	c.maxEjectionTime = durationOr(od.GetMaxEjectionTime(), max(300*time.Second, c.baseEjectionTime))
	cc.outlier = c
	var errs []error
	if od.GetSplitExternalLocalOriginErrors() {
		errs = append(errs, errors.New("outlier_detection.split_external_local_origin_errors: true is not supported by envoysim"))
	}
	// DetectorImpl::create.
	if c.maxEjectionTime < c.baseEjectionTime {
		errs = append(errs, errors.New("outlier detector's max_ejection_time cannot be smaller than base_ejection_time"))
	}
	return errors.Join(errs...)
}
