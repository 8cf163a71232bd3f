package workload

import (
	"math"
	"testing"
	"time"
)

// validSpec is a valid spec using every field.
func validSpec() Spec {
	eu := baseSource("eu", 5)
	eu.UTCOffsetHours, eu.DiurnalAmplitude, eu.GammaShape = 1, 0.6, 0.5
	eu.Bursts = []Burst{{At: time.Minute, Duration: time.Minute, Factor: 3}}
	eu.Priorities = []Share{{PriorityCritical, 1}, {PriorityStandard, 3}}
	eu.SessionShare, eu.SessionTurns, eu.SessionThink = 0.3, 4, 20*time.Second
	eu.SharedPrefixTokens = 512
	eu.Documents, eu.DocumentTokens, eu.DocumentsPerRequest, eu.DocumentZipf = 1000, 256, 3, 1.1
	us := baseSource("us", 3)
	us.UTCOffsetHours = -5
	return Spec{Duration: time.Hour, Period: time.Hour, Seed: 1, Sources: []SourceSpec{eu, us}}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Spec)
		paths  []string // nil: valid
	}{
		{"valid", func(*Spec) {}, nil},
		{"defaults are valid", func(s *Spec) { s.Period = 0; s.Sources[1].GammaShape = 0; s.Sources[0].SessionThink = 0 }, nil},
		{"no duration, negative period", func(s *Spec) { s.Duration = 0; s.Period = -time.Hour }, []string{"duration", "period"}},
		{"no source", func(s *Spec) { s.Sources = nil }, []string{"sources"}},
		{"names", func(s *Spec) { s.Sources[1].Name = "eu"; s.Sources = append(s.Sources, baseSource("", 1)) }, []string{"sources[1].name", "sources[2].name"}},
		{"time zone", func(s *Spec) { s.Sources[0].UTCOffsetHours = 15 }, []string{"sources[0].utc_offset_hours"}},
		{"rate", func(s *Spec) { s.Sources[1].MeanRate = 0 }, []string{"sources[1].mean_rate"}},
		{"infinite rate", func(s *Spec) { s.Sources[1].MeanRate = math.Inf(1) }, []string{"sources[1].mean_rate"}},
		{"amplitude", func(s *Spec) { s.Sources[0].DiurnalAmplitude = 1.5 }, []string{"sources[0].diurnal_amplitude"}},
		{"NaN amplitude", func(s *Spec) { s.Sources[0].DiurnalAmplitude = math.NaN() }, []string{"sources[0].diurnal_amplitude"}},
		{"gamma shape", func(s *Spec) { s.Sources[0].GammaShape = 0.001 }, []string{"sources[0].gamma_shape"}},
		{
			"bursts",
			func(s *Spec) {
				s.Sources[0].Bursts = []Burst{{At: -time.Second, Duration: 0, Factor: -1}, {At: 2 * time.Hour, Duration: time.Second, Factor: math.NaN()}}
			},
			[]string{"sources[0].bursts[0].at", "sources[0].bursts[0].duration", "sources[0].bursts[0].factor", "sources[0].bursts[1].at", "sources[0].bursts[1].factor"},
		},
		{"no model", func(s *Spec) { s.Sources[1].Models = nil }, []string{"sources[1].models"}},
		{"model shares", func(s *Spec) { s.Sources[1].Models = []Share{{"a", 1}, {"a", -1}, {"", 1}} }, []string{"sources[1].models[1].name", "sources[1].models[1].weight", "sources[1].models[2].name"}},
		{"priority names", func(s *Spec) { s.Sources[0].Priorities = []Share{{"urgent", 1}} }, []string{"sources[0].priorities[0].name"}},
		{"lognormal", func(s *Spec) { s.Sources[0].Lengths = Lengths{InputMean: 0.5, OutputMean: 100, OutputP99: 50} }, []string{"sources[0].lengths.input_mean", "sources[0].lengths.output_p99"}},
		{"tail too heavy", func(s *Spec) { s.Sources[0].Lengths.InputP99 = 20 * s.Sources[0].Lengths.InputMean }, []string{"sources[0].lengths.input_p99"}},
		{"rows and lognormal", func(s *Spec) { s.Sources[0].Lengths.Rows = []Row{{Input: 1, Output: 1}} }, []string{"sources[0].lengths"}},
		{"bad row", func(s *Spec) { s.Sources[0].Lengths = Lengths{Rows: []Row{{Input: 1}, {Input: -1}}} }, []string{"sources[0].lengths.rows[1]"}},
		{"sessions", func(s *Spec) { s.Sources[0].SessionShare = 1.1; s.Sources[0].SessionThink = -time.Second }, []string{"sources[0].session_share", "sources[0].session_think"}},
		{"turns below one", func(s *Spec) { s.Sources[0].SessionTurns = 0.5 }, []string{"sources[0].session_turns"}},
		{"turns unused but NaN", func(s *Spec) { s.Sources[1].SessionTurns = math.NaN() }, []string{"sources[1].session_turns"}},
		{"shared prefix", func(s *Spec) { s.Sources[0].SharedPrefixTokens = MaxTokens }, []string{"sources[0].shared_prefix_tokens"}},
		{"documents negative", func(s *Spec) { s.Sources[0].Documents = -1 }, []string{"sources[0].documents"}},
		{"too many documents", func(s *Spec) { s.Sources[0].Documents = MaxDocuments + 1 }, []string{"sources[0].documents"}},
		{"documents need tokens and a count", func(s *Spec) { s.Sources[0].DocumentTokens, s.Sources[0].DocumentsPerRequest = 0, 0 }, []string{"sources[0].document_tokens", "sources[0].documents_per_request"}},
		{"more per request than documents", func(s *Spec) { s.Sources[0].DocumentsPerRequest = 1001 }, []string{"sources[0].documents_per_request"}},
		{"document zipf", func(s *Spec) { s.Sources[0].DocumentZipf = MaxDocumentZipf + 0.5 }, []string{"sources[0].document_zipf"}},
		{"documents overflow the context", func(s *Spec) { s.Sources[0].DocumentTokens = 10752 }, []string{"sources[0].document_tokens"}},
		{"documents just fit", func(s *Spec) { s.Sources[0].DocumentTokens = 10751 }, nil},
		{"unused document fields are valid", func(s *Spec) { s.Sources[0].Documents = 0 }, nil},
		{
			"unused document fields are in range",
			func(s *Spec) {
				s.Sources[1].DocumentTokens, s.Sources[1].DocumentsPerRequest, s.Sources[1].DocumentZipf = MaxTokens, -1, math.NaN()
			},
			[]string{"sources[1].document_tokens", "sources[1].documents_per_request", "sources[1].document_zipf"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			tt.mutate(&s)
			err := s.Validate()
			if tt.paths == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			checkFieldErrors(t, err, tt.paths)
			if _, gerr := Generate(s); gerr == nil || gerr.Error() != err.Error() {
				t.Errorf("Generate error %v, want the Validate error", gerr)
			}
		})
	}
}

func TestValidateMessagesNameValues(t *testing.T) {
	s := validSpec()
	s.Sources[1].MeanRate = -2.5
	s.Sources[0].Bursts[0].Factor = -4
	s.Sources[0].DocumentTokens = 20000
	want := "sources[0].bursts[0].factor: -4: want a finite rate multiplier >= 0\n" +
		"sources[0].document_tokens: 20000: 3 documents of 20000 tokens after a 512-token system prompt make 60512 tokens, want < 32768 (room for a question)\n" +
		"sources[1].mean_rate: -2.5: want requests per second > 0"
	if err := s.Validate(); err == nil || err.Error() != want {
		t.Errorf("Validate:\n%v\nwant:\n%s", err, want)
	}
}
