package workload

import (
	"math"
	"math/rand/v2"
	"time"
)

// Purposes of the random streams of a source: each source and purpose has
// its own PCG stream, so that arrivals do not move when attributes change.
const (
	streamArrivals = iota
	streamAttributes
	streamDocuments
	streamAdapters
)

// newRand returns the generator of one source (or replay) and purpose.
func newRand(seed uint64, index, purpose int) *rand.Rand {
	return rand.New(rand.NewPCG(seed, mix(mix(tagStream, uint64(index)), uint64(purpose))))
}

// Generate returns the requests of the workload s, sorted by At (ties in
// the order of s.Sources), or the error of [Spec.Validate]. The same s
// gives the same requests. See the package documentation for the arrival
// process, lengths, sessions and prefix hashes.
func Generate(s Spec) ([]Request, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	s = s.withDefaults()
	streams := make([][]Request, len(s.Sources))
	for i, src := range s.Sources {
		streams[i] = newSourceGen(s, i, src.withDefaults()).run()
	}
	if len(streams) == 1 {
		return streams[0], nil
	}
	return mergeSorted(streams), nil
}

// sourceGen generates the requests of one source.
type sourceGen struct {
	src           SourceSpec
	duration      time.Duration
	in            *intensity
	arrivals      *rand.Rand
	attrs         *rand.Rand
	models, prios picker
	input, output lognormal
	sys           [][]uint64 // system prompt blocks per model index
	sessions      *sessions
	docs          *documents // nil without documents
	adapters      *adapters  // nil without adapters
}

// newSourceGen prepares source i of s; s and the source have their
// defaults and are valid.
func newSourceGen(s Spec, i int, src SourceSpec) *sourceGen {
	g := &sourceGen{
		src:      src,
		duration: s.Duration,
		in:       newIntensity(src, s.Period, s.Duration),
		arrivals: newRand(s.Seed, i, streamArrivals),
		attrs:    newRand(s.Seed, i, streamAttributes),
		models:   newPicker(src.Models, ""),
		prios:    newPicker(src.Priorities, PriorityStandard),
	}
	growth := src.Lengths.InputMean + src.Lengths.OutputMean
	if rows := src.Lengths.Rows; len(rows) == 0 {
		// Validate checked that both solve.
		g.input, _ = lognormalFromMeanP99(src.Lengths.InputMean, src.Lengths.InputP99)
		g.output, _ = lognormalFromMeanP99(src.Lengths.OutputMean, src.Lengths.OutputP99)
	} else {
		sum := 0
		for _, r := range rows {
			sum += r.Input + r.Output
		}
		growth = float64(sum) / float64(len(rows))
	}
	g.sessions = newSessions(src, s.Seed, growth)
	g.sys = make([][]uint64, len(g.models.names))
	for m, name := range g.models.names {
		g.sys[m] = systemBlocks(src.Name, name, src.SharedPrefixTokens)
	}
	g.docs = newDocuments(src, s.Seed, i, g.models.names, g.sys)
	g.adapters = newAdapters(src.Adapters, s.Seed, i, g.models.names)
	return g
}

// run draws the arrivals: a stationary renewal process of unit rate with
// Gamma(k, 1/k) gaps in operational time u, each point mapped to
// t = Λ⁻¹(u). The first point is drawn from the stationary forward
// recurrence time (a length-biased gap, Gamma(k+1, 1/k), times a uniform),
// so that the rate is right from the start.
func (g *sourceGen) run() []Request {
	k := g.src.GammaShape
	total := g.in.total()
	reqs := make([]Request, 0, int(total+4*math.Sqrt(total)/math.Sqrt(k))+16)
	u := gammaVariate(g.arrivals, k+1) / k * g.arrivals.Float64()
	seg, t := 0, 0.0
	for u < total {
		t = g.in.inverse(u, &seg, t)
		at := time.Duration(t * float64(time.Second))
		if at >= g.duration {
			break
		}
		reqs = append(reqs, g.request(at, t))
		u += gammaVariate(g.arrivals, k) / k
	}
	return reqs
}

// request draws the attributes of the request arriving at at (t seconds).
// Model, priority, lengths and the session coin are drawn first for every
// request, session turn or not, so that these draws stay aligned; the
// documents of a request or session's first turn come from their own
// stream.
func (g *sourceGen) request(at time.Duration, t float64) Request {
	r := g.attrs
	model, prio := g.models.pick(r), g.prios.pick(r)
	msg, out := g.lengths(r)
	inSession := r.Float64() < g.src.SessionShare
	var s *session
	if inSession {
		s = g.sessions.take(t, msg)
	}
	var prompt int
	if s != nil {
		prompt = s.prompt + s.output + msg
	} else {
		// The system prompt and documents, then the question, cut to fit.
		lead, leadTokens := g.sys[model], g.src.SharedPrefixTokens
		if g.docs != nil {
			lead, leadTokens = g.docs.lead(model)
		}
		prompt = min(leadTokens+msg, MaxTokens)
		if !inSession {
			adapter := g.adapters.draw(model)
			return Request{
				At:       at,
				Source:   g.src.Name,
				Model:    g.models.names[model],
				Adapter:  adapter,
				Priority: g.prios.names[prio],
				Prompt:   prompt,
				Output:   out,
				Prefix:   salt(lead, adapter),
				Tenant:   g.src.Tenant,
			}
		}
		s = g.sessions.start(r, model, prio, lead, leadTokens)
		s.adapter = g.adapters.draw(model)
	}
	prefix := g.sessions.turn(r, s, t, prompt, out)
	return Request{
		At:       at,
		Source:   g.src.Name,
		Model:    g.models.names[s.model],
		Adapter:  s.adapter,
		Priority: g.prios.names[s.priority],
		Prompt:   prompt,
		Output:   out,
		Session:  s.key,
		Prefix:   salt(prefix, s.adapter),
		Tenant:   g.src.Tenant,
	}
}

// lengths draws the new message and output lengths, both in [1, MaxTokens].
func (g *sourceGen) lengths(r *rand.Rand) (msg, out int) {
	if rows := g.src.Lengths.Rows; len(rows) > 0 {
		row := rows[r.IntN(len(rows))]
		return min(max(row.Input, 1), MaxTokens), min(max(row.Output, 1), MaxTokens)
	}
	return g.input.draw(r), g.output.draw(r)
}
