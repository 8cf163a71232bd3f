package engine

import (
	"encoding/base64"
	"encoding/binary"
	"hash/fnv"
	"math"
	"net/http"
	"unicode/utf8"
)

// embeddingDims is the length of every embedding vector.
const embeddingDims = 8

// handleEmbeddings answers at once: embeddings do not go through the
// Backend, but count as prompt tokens and as requests finished by "stop".
func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	job, e := decodeEmbedding(body)
	if e != nil {
		s.writeError(w, e)
		return
	}
	_, label, ok := s.checkModel(w, job.model)
	if !ok {
		return
	}
	resp := embeddingList{Object: "list", Data: make([]embeddingData, len(job.inputs)), Model: job.model}
	for i, in := range job.inputs {
		vec := embed(job.model, in)
		d := embeddingData{Object: "embedding", Index: i, Embedding: vec}
		if job.base64 {
			d.Embedding = encodeFloats(vec)
		}
		resp.Data[i] = d
		resp.Usage.PromptTokens += estimateTokens(utf8.RuneCountInString(in))
	}
	resp.Usage.TotalTokens = resp.Usage.PromptTokens
	s.metrics.promptTokens.WithLabelValues(label).Add(float64(resp.Usage.PromptTokens))
	s.metrics.success.WithLabelValues(label, finishStop).Add(float64(len(job.inputs)))
	if err := writeJSON(w, http.StatusOK, resp); err != nil {
		s.opts.Logger.DebugContext(r.Context(), "engine: write embeddings", "err", err)
	}
}

// embed returns a deterministic unit vector for (model, text).
func embed(model, text string) []float32 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(model))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(text))
	state := h.Sum64()
	vec := make([]float32, embeddingDims)
	var norm float64
	for i := range vec {
		// splitmix64
		state += 0x9e3779b97f4a7c15
		z := state
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		v := float64(z>>11)/(1<<53)*2 - 1 // [-1, 1)
		vec[i] = float32(v)
		norm += v * v
	}
	if norm = math.Sqrt(norm); norm > 0 {
		for i := range vec {
			vec[i] = float32(float64(vec[i]) / norm)
		}
	}
	return vec
}

// encodeFloats is the base64 of vec as little-endian float32s, as OpenAI's
// encoding_format "base64".
func encodeFloats(vec []float32) string {
	b := make([]byte, 0, 4*len(vec))
	for _, v := range vec {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return base64.StdEncoding.EncodeToString(b)
}
