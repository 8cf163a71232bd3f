package workload

import "time"

// Defaults of a [Spec] and its sources.
const (
	// DefaultPeriod is the period of the daily sine: one day. Experiments
	// compress it (a 1h period plays a day in an hour).
	DefaultPeriod = 24 * time.Hour
	// DefaultGammaShape makes arrivals Poisson.
	DefaultGammaShape = 1.0
	// DefaultSessionThink is the mean time between two turns of a session.
	DefaultSessionThink = 10 * time.Second
	// PeakLocalHour is when the daily sine peaks, in local hours of the
	// source's time zone: interactive LLM traffic follows the working day
	// and is highest in the early afternoon.
	PeakLocalHour = 14.0
)

// Spec describes a synthetic workload.
type Spec struct {
	// Duration is the length of the workload, > 0: requests arrive in
	// [0, Duration). Workload time 0 is 00:00 UTC of the daily cycle.
	Duration time.Duration
	// Seed makes the workload reproducible: the same Spec and Seed give the
	// same requests.
	Seed uint64
	// Period is the period of the daily sine; 0 means [DefaultPeriod].
	// Local hours scale with it: with a 1h period, one local hour lasts
	// 2.5 minutes.
	Period time.Duration
	// Sources are the fleets requests enter, at least one, with unique
	// names.
	Sources []SourceSpec
}

// SourceSpec describes the requests entering one source (a region's Envoy
// fleet).
type SourceSpec struct {
	// Name is the source's name, copied into [Request.Source]; not empty.
	Name string
	// Tenant is the tenant of this spec's requests, copied into
	// [Request.Tenant] ("" none). Several specs may name one source, each
	// with its own tenant: their requests merge at the source.
	Tenant string
	// UTCOffsetHours is the source's time zone, in hours from UTC, in
	// [-12, 14]: the daily sine peaks at [PeakLocalHour] local time, that
	// is at (PeakLocalHour - UTCOffsetHours) mod 24 hours of UTC, scaled to
	// the period.
	UTCOffsetHours float64
	// MeanRate is the arrival rate averaged over a period, in requests per
	// second, > 0. Bursts come on top of it.
	MeanRate float64
	// DiurnalAmplitude is A in [0, 1]: the rate at time t is
	// MeanRate × (1 + A cos(2π(local(t) - PeakLocalHour)/24h)), where
	// local(t) is the local time of day, so it swings between
	// MeanRate × (1 - A) and MeanRate × (1 + A).
	DiurnalAmplitude float64
	// GammaShape is the shape k of the Gamma inter-arrival times, in
	// [0.01, 100]; 0 means [DefaultGammaShape] (Poisson). The coefficient
	// of variation of the gaps is 1/sqrt(k): below 1 is burstier than
	// Poisson, above 1 more regular.
	GammaShape float64
	// Bursts multiply the rate in their windows; overlapping bursts
	// multiply each other.
	Bursts []Burst
	// Models the requests ask for, by share; at least one.
	Models []Share
	// Adapters gives a share of the requests a LoRA adapter of their
	// model.
	Adapters AdapterSpec
	// Priorities of the requests by share, with names "critical",
	// "standard" or "sheddable"; empty means all "standard".
	Priorities []Share
	// Lengths of prompts and outputs. For a session's later turns they
	// give the new message only: its prompt also holds the history.
	Lengths Lengths
	// SessionShare is the fraction of requests, in [0, 1], that are turns
	// of multi-turn sessions.
	SessionShare float64
	// SessionTurns is the mean number of turns per session, >= 1 when
	// SessionShare > 0; the number is geometric (at least 1), and a
	// session also ends when its next prompt would exceed [MaxTokens].
	SessionTurns float64
	// SessionThink is the mean time between two turns of one session
	// (uniform in [0.5, 1.5] × SessionThink, then the next session request
	// of the source takes the turn); 0 means [DefaultSessionThink].
	SessionThink time.Duration
	// SharedPrefixTokens is the length of the system prompt of each model
	// of the source, in [0, MaxTokens): it is prepended to every prompt and
	// its full blocks are the first hashes of every request's Prefix.
	SharedPrefixTokens int
	// Documents is the number of documents in the source's retrieval pool,
	// in [0, MaxDocuments]; 0 means none. With documents, a prompt is the
	// system prompt, then DocumentsPerRequest distinct documents in the
	// order drawn (the most relevant first), then the question, whose
	// length Lengths gives. Document i (from 0) has Zipf weight
	// (i+1)^-DocumentZipf: the first document is drawn from the whole
	// pool, each next one from those not drawn yet. A document's tokens
	// depend on the source, Spec.Seed and its index only. The full blocks
	// of the system prompt and documents are the request's Prefix: as the
	// hashes are chained, two requests of one model share the blocks of
	// their common leading documents only; with different first documents
	// they share the system prompt alone, whatever documents follow. A
	// session draws documents at its first turn only; its later turns keep
	// them as history. Documents have their own random stream: adding them
	// moves no arrival, model, priority, length or session draw.
	Documents int
	// DocumentTokens is the length of every document in tokens (fixed-size
	// chunks, as retrieval pipelines cut them), >= 1 when Documents > 0,
	// with SharedPrefixTokens + DocumentsPerRequest × DocumentTokens <
	// MaxTokens: documents are never cut or dropped, the question is cut
	// to fit MaxTokens instead (keeping at least one token).
	DocumentTokens int
	// DocumentsPerRequest is the number of distinct documents in a request
	// (or a session's first turn), in [1, Documents] when Documents > 0.
	DocumentsPerRequest int
	// DocumentZipf is the exponent s of the documents' Zipf popularity, in
	// [0, MaxDocumentZipf]: 0 is uniform; the larger s, the more requests
	// draw the documents of lowest index (document 0 is the most popular).
	DocumentZipf float64
}

// Burst multiplies the rate of a source by Factor during
// [At, At+Duration), in workload time.
type Burst struct {
	At       time.Duration // start, in [0, Spec.Duration)
	Duration time.Duration // > 0; the window is clipped to the workload
	Factor   float64       // rate multiplier, finite, >= 0 (0 is silence)
}

// Lengths are the distributions of prompt and output lengths, in tokens:
// either lognormal, given by mean and 99th percentile, or, when Rows is not
// empty, (input, output) pairs drawn uniformly from Rows (the means and
// percentiles must then be 0). Drawn lengths are rounded and clamped to
// [1, MaxTokens], which moves the mean slightly when the tail is heavy.
type Lengths struct {
	// InputMean and InputP99 give the prompt length: InputMean >= 1 and
	// InputMean <= InputP99 <= MaxLognormalRatio × InputMean.
	InputMean, InputP99 float64
	// OutputMean and OutputP99 give the output length, bounded likewise.
	OutputMean, OutputP99 float64
	// Rows are trace rows to draw pairs from instead.
	Rows []Row
}

// withDefaults returns s with zero fields set to their defaults.
func (s Spec) withDefaults() Spec {
	if s.Period == 0 {
		s.Period = DefaultPeriod
	}
	return s
}

func (s SourceSpec) withDefaults() SourceSpec {
	if s.GammaShape == 0 {
		s.GammaShape = DefaultGammaShape
	}
	if s.SessionThink == 0 {
		s.SessionThink = DefaultSessionThink
	}
	return s
}
