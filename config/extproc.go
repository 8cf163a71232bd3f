package config

import "time"

// ExtProc configures the ext_proc service.
type ExtProc struct {
	// DecisionLogSize is how many decision records are kept; default
	// 10000, at most MaxDecisionLogSize.
	DecisionLogSize int `yaml:"decision_log_size" json:"decision_log_size"`
	// MaxBodyBytes is the largest request body the service parses; default
	// 8 MiB. A larger one gets 413.
	MaxBodyBytes int `yaml:"max_body_bytes" json:"max_body_bytes"`
	// MaxHeldBodyBytes bounds the request bodies ILB holds at once across
	// all streams while they arrive in chunks (STREAMED and
	// FULL_DUPLEX_STREAMED bodies are kept until their end to be
	// decided on): a chunk past it refuses its request with a 503
	// body_memory (retry later), so that many slow bodies cannot take the
	// process's memory. Default 128 MiB; at least max_body_bytes.
	MaxHeldBodyBytes int64 `yaml:"max_held_body_bytes" json:"max_held_body_bytes"`
	// DefaultPromptTokens and DefaultOutputTokens estimate a request's
	// token cost (its demand) when it does not say: no body read (prompt
	// from Content-Length / 4 when known), no max_tokens. Defaults 500 and
	// 250.
	DefaultPromptTokens int `yaml:"default_prompt_tokens" json:"default_prompt_tokens"`
	DefaultOutputTokens int `yaml:"default_output_tokens" json:"default_output_tokens"`
	// ReportInterval is how often measured demand is reported to the
	// controller (over LRS, or in memory in the all-in-one process);
	// default 1s.
	ReportInterval Duration `yaml:"report_interval" json:"report_interval"`
	// LiveTTL: the engines' live state (unhealthy clusters, saturation)
	// older than this is ignored, so nothing stays excluded or shed after
	// the signals stop; default 5s.
	LiveTTL Duration `yaml:"live_ttl" json:"live_ttl"`
	// Steering moves a request off the cluster Envoy's draw picked when
	// another cluster it may use would begin it sooner, round trip
	// included (balancing by the queue ahead), when the drawn one would
	// give its first token past controller.capacity.ttft_target and
	// another within it, or, where the engines give no TTFT, when another
	// has less queue pressure (docs/architecture.md); default true. false:
	// requests follow the weights (and the redraw off an excluded
	// cluster) only, e.g. to check a plan or compare with it.
	Steering bool `yaml:"steering" json:"steering"`
	// RetryAfter is the retry-after of a 429, in whole seconds; default 1.
	RetryAfter int `yaml:"retry_after" json:"retry_after"`
	// DecisionLogBytes bounds the decision log's memory (an estimate of
	// the records' size): the oldest records are evicted past it, as past
	// DecisionLogSize; default 64 MiB.
	DecisionLogBytes int64 `yaml:"decision_log_bytes" json:"decision_log_bytes"`
	// MaxStreams caps the ext_proc streams open at once (one per request
	// in flight, about 15 KB each); a stream over it is refused at once
	// with RESOURCE_EXHAUSTED, and Envoy applies the source's fail mode.
	// Default 20000.
	MaxStreams int `yaml:"max_streams" json:"max_streams"`
	// MaxStreamsPerPeer caps the streams one peer (a verified identity
	// and IP address, or an IP address without client certificates) may
	// hold of MaxStreams: past it its new streams are refused with
	// RESOURCE_EXHAUSTED, so that a peer never sending response headers
	// cannot take every stream. 0 (the default): half of MaxStreams;
	// at most MaxStreams.
	MaxStreamsPerPeer int `yaml:"max_streams_per_peer" json:"max_streams_per_peer"`
	// MaxFollowedStreams caps the responses ILB follows at once to count
	// what engines generate (a request's demand past an ordinary
	// request's share is booked as it is generated): each keeps its
	// stream open, and gets every body chunk, until the body ends or the
	// request's whole estimate is booked; an event stream with nothing
	// left to book is followed to its first event, which brings the
	// first token (a streaming response's headers come before it). Past
	// it a request counts its provisional share only, and its wait for a
	// first token ends at the response headers. 0 (the default): a
	// quarter of MaxStreams;
	// at most MaxStreams.
	MaxFollowedStreams int `yaml:"max_followed_streams" json:"max_followed_streams"`
	// StreamIdleTimeout ends an ext_proc stream on which Envoy owes ILB a
	// message (the request headers, or the body it announced) and sent
	// nothing for this long: Envoy itself gives up after
	// envoy.message_timeout. Default message_timeout + 1s; at least
	// message_timeout.
	StreamIdleTimeout Duration `yaml:"stream_idle_timeout" json:"stream_idle_timeout"`
	// MaxReportRate bounds the requests per second one demand report
	// (LRS) may claim for one (source, model, priority): a report over it
	// is refused as implausible. Default 100000.
	MaxReportRate float64 `yaml:"max_report_rate" json:"max_report_rate"`
}

// Listen gives the addresses ILB's own servers bind, host:port.
type Listen struct {
	XDS     string `yaml:"xds" json:"xds"`         // default 127.0.0.1:18000
	ExtProc string `yaml:"extproc" json:"extproc"` // default 127.0.0.1:18001
	Admin   string `yaml:"admin" json:"admin"`     // default 127.0.0.1:18002
	// Connections bounds the connections of every port, so that idle or
	// handshake-less connections cannot take the process's file
	// descriptors (and with them the other ports).
	Connections Connections `yaml:"connections" json:"connections"`
}

// Connections are the connection limits of ILB's ports. A count of 0 is
// derived at start from the process's open-file limit F: ext_proc
// (with the endpoint-picker ports) 45% of F, xDS (ADS and LRS) 25%, admin
// 5% (at most 1,024); per peer, 1/8 of its port's (at least 64). What is
// left of F serves ILB's own outbound connections. The effective limits
// are logged at start.
type Connections struct {
	ExtProc int `yaml:"extproc" json:"extproc"`
	XDS     int `yaml:"xds" json:"xds"`
	Admin   int `yaml:"admin" json:"admin"`
	// PerPeer is the most connections one IP address holds on a port.
	PerPeer int `yaml:"per_peer" json:"per_peer"`
	// HandshakeTimeout closes a connection that did not finish its TLS
	// and HTTP/2 handshakes in time (gRPC's default is 120 s); 0: 10s.
	HandshakeTimeout Duration `yaml:"handshake_timeout" json:"handshake_timeout"`
	// IdleTimeout closes a gRPC connection without a stream for this
	// long, and an admin connection between requests; 0: 5m.
	IdleTimeout Duration `yaml:"idle_timeout" json:"idle_timeout"`
}

// Handshake is HandshakeTimeout, 10s when 0.
func (c Connections) Handshake() time.Duration {
	if c.HandshakeTimeout > 0 {
		return c.HandshakeTimeout.Std()
	}
	return 10 * time.Second
}

// Idle is IdleTimeout, 5m when 0.
func (c Connections) Idle() time.Duration {
	if c.IdleTimeout > 0 {
		return c.IdleTimeout.Std()
	}
	return 5 * time.Minute
}

// MaxDecisionLogSize bounds extproc.decision_log_size: a lookup by
// request id and an admin query scan the records kept.
const MaxDecisionLogSize = 1_000_000
