package extproc

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/ilbproject/ilb/header"
)

// Reason codes of routed requests.
const (
	reasonWeighted = "weighted" // random draw over the weights
	reasonSession  = "session"  // draw from the session key: sticky
)

// decide resolves the model, draws, predicts the cluster Envoy will take
// and returns the header mutation that makes Envoy route there. It fills
// rec. body is nil when ILB decides on headers alone.
func (s *Server) decide(st *State, src *sourceState, h *hints, body *Body, rec *Record) (*extprocv3.HeaderMutation, error) {
	name := h.model
	rec.ModelFrom = "header"
	session, from := h.session, "header"
	if body != nil {
		name, rec.ModelFrom = body.Model, "body"
		rec.Stream, rec.MaxTokens, rec.PromptTokens = body.Stream, body.MaxTokens, body.PromptTokens
		if session == "" {
			session, from = body.User, "user"
		}
		if session == "" {
			session, from = body.PromptCacheKey, "prompt_cache_key"
		}
	}
	if name == "" {
		name, rec.ModelFrom = src.defaultModel, "default"
	}
	rec.RequestedModel = name
	model, ok := st.models[name]
	if !ok {
		return nil, &RequestError{
			Status: 404, Type: "invalid_request_error", Code: "model_not_found", Param: "model",
			Msg: fmt.Sprintf("the model %q does not exist (models: %s)", name, st.known),
		}
	}
	rec.Model = model
	c := src.cells[model]
	rec.Candidates = c.candidates
	rec.TotalWeight = c.total
	var draw uint64
	if session != "" {
		draw = sessionDraw(session)
		rec.DrawFrom, rec.Reason = "session", reasonSession
		rec.SessionHash, rec.SessionFrom = strconv.FormatUint(draw, 16), from
	} else {
		draw = s.opts.Rand()
		rec.DrawFrom, rec.Reason = "random", reasonWeighted
	}
	cluster, slot, ok := c.pick(draw)
	if !ok {
		return nil, &RequestError{
			Status: 503, Type: "service_unavailable", Code: "no_capacity",
			Msg: fmt.Sprintf("no engine cluster has capacity for model %q from source %q; retry later", model, src.name),
		}
	}
	rec.Draw, rec.Slot, rec.Chosen = draw, slot, cluster
	return &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
		setRaw(header.RouteModel, model),
		setRaw(header.RouteDraw, strconv.FormatUint(draw, 10)),
	}}, nil
}

// sessionDraw maps a session key to a stable draw: FNV-1a, then the
// splitmix64 finalizer so that nearby keys spread over every slot. It is
// the same in every ext_proc replica and across restarts.
func sessionDraw(key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	var b [8]byte
	z := binary.BigEndian.Uint64(h.Sum(b[:0]))
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
