package experiment

import (
	"fmt"
	"slices"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/sim/replica"
	"github.com/ilbproject/ilb/sim/workload"
)

// The standard world: three regions a Envoy fleet each, ten engine
// clusters of Llama-3-8B on H100s and A100s, 26 replicas. Round trips are
// typical public-cloud figures between US East, Western Europe and
// Singapore; egress is the common inter-region price.
const model = "llama-3.1-8b-instruct"

func world() Fleet {
	link := func(a, b string, rtt, usd float64) []config.Link {
		return []config.Link{{From: a, To: b, RTTMs: rtt, EgressUSDPerGB: usd}, {From: b, To: a, RTTMs: rtt, EgressUSDPerGB: usd}}
	}
	var links []config.Link
	links = append(links, link("us-east", "eu-west", 80, 0.02)...)
	links = append(links, link("us-east", "ap-southeast", 220, 0.08)...)
	links = append(links, link("eu-west", "ap-southeast", 160, 0.08)...)
	h100, a100 := replica.ProfileLlama3x8BH100, replica.ProfileLlama3x8BA100
	c := func(name, region string, n int, p string) Cluster {
		return Cluster{Name: name, Region: region, Models: []string{model}, Replicas: n, Profile: p}
	}
	return Fleet{
		Regions: []string{"us-east", "eu-west", "ap-southeast"},
		Links:   links,
		Sources: []Source{{Name: "edge-us", Region: "us-east"}, {Name: "edge-eu", Region: "eu-west"}, {Name: "edge-ap", Region: "ap-southeast"}},
		Models:  []string{model},
		Clusters: []Cluster{
			c("us-east-a", "us-east", 3, h100), c("us-east-b", "us-east", 3, h100), c("us-east-c", "us-east", 3, a100), c("us-east-d", "us-east", 2, h100),
			c("eu-west-a", "eu-west", 3, h100), c("eu-west-b", "eu-west", 3, h100), c("eu-west-c", "eu-west", 2, a100),
			c("ap-southeast-a", "ap-southeast", 3, h100), c("ap-southeast-b", "ap-southeast", 2, h100), c("ap-southeast-c", "ap-southeast", 2, a100),
		},
	}
}

// conversation lengths approximate the Azure LLM 2023 conversation trace
// (input mean 1155, p99 4142; output mean 211); code lengths its code
// trace (input mean 2048, output mean 28). Source: Azure Public Dataset,
// Patel et al., "Splitwise", ISCA 2024, CC-BY 4.0.
var (
	conversation = workload.Lengths{InputMean: 1155, InputP99: 4142, OutputMean: 211, OutputP99: 900}
	code         = workload.Lengths{InputMean: 2048, InputP99: 7400, OutputMean: 28, OutputP99: 210}
	// longPrompt is agent and RAG conversation traffic: prompts of mean
	// ~12k tokens (median ~7k, p99 ~85k: the conversation so far, tool
	// results, documents), answers of mean ~350.
	longPrompt = workload.Lengths{InputMean: 12000, InputP99: 85000, OutputMean: 350, OutputP99: 2000}
	priorities = []workload.Share{{Name: "critical", Weight: 0.2}, {Name: "standard", Weight: 0.5}, {Name: "sheddable", Weight: 0.3}}
)

// source builds a workload source with the standard mix.
func source(name string, utcOffset, rate, amplitude float64, lengths workload.Lengths) workload.SourceSpec {
	return workload.SourceSpec{
		Name: name, UTCOffsetHours: utcOffset, MeanRate: rate, DiurnalAmplitude: amplitude,
		Models: []workload.Share{{Name: model, Weight: 1}}, Priorities: priorities, Lengths: lengths,
		SessionShare: 0.3, SessionTurns: 3, SharedPrefixTokens: 256,
	}
}

// generate gives s a synthetic workload of these sources over d.
func generate(s *Scenario, d time.Duration, period time.Duration, sources ...workload.SourceSpec) {
	spec := workload.Spec{Duration: d, Period: period, Sources: sources}
	s.gen = &spec
	s.Workload = func(seed uint64) ([]workload.Request, error) {
		sp := spec
		sp.Seed = seed
		return workload.Generate(sp)
	}
}

// ScenarioNames lists the scenarios in report order.
func ScenarioNames() []string {
	return []string{"diurnal", "diurnal-peak", "outage", "burst", "residency", "drain", "long-prompt"}
}

// TenantScenarioNames lists the scenarios of tenants' fair sharing
// (make bench-tenants), apart from the routing benchmark's.
func TenantScenarioNames() []string { return []string{"tenant-flood"} }

// tenantFlood is the tenant-flood scenario lasting d: four tenants with
// equal shares at every source, together at ~80% of the fleet, all
// standard priority (a platform without priority tiers: with tiers, a
// flood's more important requests pass before the others' less important
// ones, and fairness holds within the priority being shed); the tenant
// "flood" asks for three times its share from 40% to 70% of the run, a
// demand of ~120% of the fleet.
func tenantFlood(s *Scenario, d time.Duration, at func(float64) time.Duration) {
	s.Summary = "four tenants with equal shares of every source at ~80% of the fleet, one priority; the tenant flood asks for 3x its share from 40% to 70% of the run (~120% of the fleet)"
	from, to := at(0.4), at(0.7)
	s.Flood = &Flood{Tenant: "flood", From: from, To: to}
	var specs []workload.SourceSpec
	for _, src := range []struct {
		name   string
		offset float64
		rate   float64
	}{{"edge-us", -5, 69}, {"edge-eu", 1, 49}, {"edge-ap", 8, 37}} {
		for _, tn := range []string{"team-a", "team-b", "team-c", "flood"} {
			spec := source(src.name, src.offset, src.rate/4, 0, conversation)
			spec.Tenant = tn
			spec.Priorities = []workload.Share{{Name: "standard", Weight: 1}}
			if tn == "flood" {
				spec.Bursts = []workload.Burst{{At: from, Duration: to - from, Factor: 3}}
			}
			specs = append(specs, spec)
		}
	}
	generate(s, d, d, specs...)
}

// LookupScenario builds the named scenario lasting d (0: one hour).
// Events and the daily cycle scale with d.
func LookupScenario(name string, d time.Duration) (Scenario, error) {
	if d <= 0 {
		d = time.Hour
	}
	// Events fall between the 1 s scrapes and 5 s ticks (+0.7 s), as a
	// real failure would: no policy sees one the instant it happens.
	at := func(f float64) time.Duration { return time.Duration(f*float64(d)) + 700*time.Millisecond }
	f := world()
	s := Scenario{Name: name, Fleet: f, Duration: d, SLO: 2 * time.Second}
	switch name {
	case "diurnal":
		s.Summary = "a compressed day: each region's demand follows its working day (peak 14:00 local, ±80%; on average ~60% of the fleet), so the regions peak hours apart and each region's peak exceeds its own capacity"
		generate(&s, d, d,
			source("edge-us", -5, 51, 0.8, conversation),
			source("edge-eu", 1, 37, 0.8, conversation),
			source("edge-ap", 8, 32, 0.8, conversation))
	case "diurnal-peak":
		s.Summary = "the compressed day of diurnal at 25% more demand (on average ~75% of the fleet): where the regions' days overlap the fleet runs at 90-100%"
		generate(&s, d, d,
			source("edge-us", -5, 64, 0.8, conversation),
			source("edge-eu", 1, 47, 0.8, conversation),
			source("edge-ap", 8, 40, 0.8, conversation))
	case "outage":
		s.Summary = "steady load at ~60% of the fleet; every replica of us-east (42% of the capacity) fails at 25% of the run, leaving less than the demand, and comes back at 55% (startup, then warm-up)"
		generate(&s, d, d,
			source("edge-us", -5, 52, 0, conversation),
			source("edge-eu", 1, 37, 0, conversation),
			source("edge-ap", 8, 28, 0, conversation))
		s.Changes = []Change{{At: at(0.25), Action: Fail, Region: "us-east"}, {At: at(0.55), Action: Recover, Region: "us-east"}}
	case "burst":
		burst := source("edge-us", -5, 26, 0, code)
		burst.GammaShape = 0.2 // code completion arrivals: CV ≈ 2.2
		span := func(f float64) time.Duration { return time.Duration(f * float64(d)) }
		burst.Bursts = []workload.Burst{{At: at(0.3), Duration: span(0.1), Factor: 4}, {At: at(0.7), Duration: span(0.05), Factor: 6}}
		s.Summary = "code-completion traffic at edge-us: long prompts, short answers, Gamma(0.2) arrivals and two bursts (×4 for 10% of the run, ×6 for 5%) over steady conversation load elsewhere"
		generate(&s, d, d, burst,
			source("edge-eu", 1, 39, 0, conversation),
			source("edge-ap", 8, 26, 0, conversation))
	case "residency":
		s.Summary = "edge-eu may only be served in eu-west (data residency) and peaks above eu-west's capacity; the other regions have room"
		for i := range s.Fleet.Sources {
			if s.Fleet.Sources[i].Name == "edge-eu" {
				s.Fleet.Sources[i].Allowed = []string{"eu-west"}
			}
		}
		generate(&s, d, d,
			source("edge-us", -5, 39, 0.5, conversation),
			source("edge-eu", 1, 43, 0.6, conversation),
			source("edge-ap", 8, 24, 0.5, conversation))
	case "drain":
		s.Summary = "half the replicas (rounded up: 2 of 3, 1 of 2) of every us-east cluster drain at 30% of the run (a rolling upgrade; 7 of us-east's 11 replicas) and come back at 60%"
		generate(&s, d, d,
			source("edge-us", -5, 60, 0, conversation),
			source("edge-eu", 1, 35, 0, conversation),
			source("edge-ap", 8, 26, 0, conversation))
		s.Changes = []Change{{At: at(0.3), Action: Drain, Region: "us-east", Fraction: 0.5}, {At: at(0.6), Action: Restore, Region: "us-east", Fraction: 0.5}}
	case "long-prompt":
		s.Summary = "agent and RAG conversations: prompts of mean ~12k tokens (median ~7k, p99 ~85k), answers of ~350, half in multi-turn sessions resending a 2k-token prefix, steady at about half of the fleet's throughput on this mix"
		long := func(name string, utcOffset, rate float64) workload.SourceSpec {
			src := source(name, utcOffset, rate, 0, longPrompt)
			src.SessionShare, src.SessionTurns, src.SharedPrefixTokens = 0.5, 4, 2048
			return src
		}
		generate(&s, d, d, long("edge-us", -5, 3.8), long("edge-eu", 1, 2.8), long("edge-ap", 8, 2.2))
	case "tenant-flood":
		tenantFlood(&s, d, at)
	default:
		return Scenario{}, fmt.Errorf("unknown scenario %q: want one of %v or %v", name, ScenarioNames(), TenantScenarioNames())
	}
	if !slices.Contains(ScenarioNames(), name) && !slices.Contains(TenantScenarioNames(), name) {
		return Scenario{}, fmt.Errorf("scenario %q is not listed", name)
	}
	return s, nil
}
