package controller

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"

	"go.yaml.in/yaml/v3"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
)

// DemandFile is the input of `ilb solve`: demand rows and, optionally,
// replica states that override the configuration's static ones.
//
//	demand:
//	  - {source: edge-us, model: llama3-8b, priority: standard,
//	     requests_per_second: 20, prompt_tokens: 800, output_tokens: 200}
//	replicas:
//	  - {cluster: us-east-vllm, ready: 1, warming: [0.5], draining: 1, unhealthy: 0}
type DemandFile struct {
	Demand   []DemandRow  `yaml:"demand"`
	Replicas []ReplicaRow `yaml:"replicas,omitempty"`
}

// DemandRow is the demand of one (source, model, priority).
type DemandRow struct {
	Source            string  `yaml:"source"`
	Model             string  `yaml:"model"` // name or alias
	Priority          string  `yaml:"priority"`
	RequestsPerSecond float64 `yaml:"requests_per_second"`
	PromptTokens      float64 `yaml:"prompt_tokens"` // mean per request
	OutputTokens      float64 `yaml:"output_tokens"` // mean per request
}

// ReplicaRow overrides the replica state of one engine cluster.
type ReplicaRow struct {
	Cluster   string    `yaml:"cluster"`
	Ready     int       `yaml:"ready"`
	Warming   []float64 `yaml:"warming,omitempty"`
	Draining  int       `yaml:"draining,omitempty"`
	Unhealthy int       `yaml:"unhealthy,omitempty"`
}

// ParseDemandFile decodes a demand file strictly and turns it into demand
// and cluster states for c, reporting every bad row at once with its
// index and field.
func ParseDemandFile(c *config.Config, data []byte) (weights.Demand, map[string]weights.ClusterState, error) {
	var f DemandFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("demand file: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, nil, errors.New("demand file: the file holds more than one YAML document")
	}
	var errs []error
	demand := weights.Demand{}
	for i, r := range f.Demand {
		at := fmt.Sprintf("demand[%d]", i)
		s, okS := c.Source(r.Source)
		if !okS {
			errs = append(errs, fmt.Errorf("%s.source: unknown source %q", at, r.Source))
		}
		name, okM := c.ResolveModel(r.Model)
		if !okM {
			errs = append(errs, fmt.Errorf("%s.model: unknown model %q", at, r.Model))
		}
		p, err := weights.ParsePriority(r.Priority)
		if r.Priority == "" {
			p, err = weights.Standard, nil
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.priority: %w", at, err))
		}
		numbersOK := true
		for _, v := range []struct {
			field string
			v     float64
		}{{"requests_per_second", r.RequestsPerSecond}, {"prompt_tokens", r.PromptTokens}, {"output_tokens", r.OutputTokens}} {
			if badValue(v.v) {
				errs = append(errs, fmt.Errorf("%s.%s: %v is not a finite number >= 0", at, v.field, v.v))
				numbersOK = false
			}
		}
		if !okS || !okM || err != nil || !numbersOK {
			continue
		}
		k := weights.DemandKey{Source: s.Name, Model: name, Priority: p}
		if _, dup := demand[k]; dup {
			errs = append(errs, fmt.Errorf("%s: a second row for (%s, %s, %s)", at, s.Name, name, p))
			continue
		}
		m, _ := modelOf(c, name)
		rate := weights.RateOf(m, r.RequestsPerSecond, r.PromptTokens, r.OutputTokens)
		if badValue(rate.CostPerSecond) {
			errs = append(errs, fmt.Errorf("%s: %v requests/s of %v prompt and %v output tokens cost %v token-cost units/s: want a finite cost",
				at, r.RequestsPerSecond, r.PromptTokens, r.OutputTokens, rate.CostPerSecond))
			continue
		}
		demand[k] = rate
	}
	states := weights.StaticState(c)
	rowOf := map[string]int{}
	for i, r := range f.Replicas {
		at := fmt.Sprintf("replicas[%d]", i)
		e, ok := c.Cluster(r.Cluster)
		if !ok {
			errs = append(errs, fmt.Errorf("%s.cluster: unknown cluster %q", at, r.Cluster))
			continue
		}
		if j, dup := rowOf[e.Name]; dup {
			errs = append(errs, fmt.Errorf("%s: a second row for cluster %s (the first is replicas[%d])", at, e.Name, j))
			continue
		}
		rowOf[e.Name] = i
		if r.Ready < 0 || r.Draining < 0 || r.Unhealthy < 0 {
			errs = append(errs, fmt.Errorf("%s: replica counts must be >= 0 (ready %d, draining %d, unhealthy %d)", at, r.Ready, r.Draining, r.Unhealthy))
			continue
		}
		for j, w := range r.Warming {
			if badValue(w) || w > 1 {
				errs = append(errs, fmt.Errorf("%s.warming[%d]: %v is not a ramp fraction in [0, 1]", at, j, w))
			}
		}
		p, _ := c.Profile(e.Profile)
		states[e.Name] = weights.NewClusterState(p.CapacityPerReplica, r.Ready, r.Warming, r.Draining, r.Unhealthy)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return demand, states, nil
}

func modelOf(c *config.Config, name string) (config.Model, bool) {
	for _, m := range c.Models {
		if m.Name == name {
			return m, true
		}
	}
	return config.Model{}, false
}

// badValue reports a rate or cost that is not a finite number >= 0.
func badValue(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) || v < 0 }
