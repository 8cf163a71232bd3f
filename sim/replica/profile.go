package replica

import (
	"errors"
	"fmt"
	"time"
)

// Defaults of the scheduler limits of a [Profile]; a zero field takes them.
const (
	// DefaultBlockSize is vLLM's KV cache block size on CUDA, in tokens
	// (--block-size 16).
	DefaultBlockSize = 16
	// DefaultMaxSeqs is vLLM's --max-num-seqs default for the OpenAI
	// server on GPUs with less than 70 GiB or A100s (newer releases use
	// 1024 on H100-class GPUs): the most sequences in one batch.
	DefaultMaxSeqs = 256
	// DefaultMaxBatchedTokens is vLLM v1's --max-num-batched-tokens default
	// for the OpenAI server with chunked prefill on GPUs with at least 70
	// GiB that are not A100s (H100, H200, MI300X): the token budget of one
	// step. See EngineArgs.get_batch_defaults in vllm/engine/arg_utils.py;
	// A100s and smaller GPUs default to 2048 (vLLM PR #17885).
	DefaultMaxBatchedTokens = 8192
)

// ErrInvalidProfile is wrapped by every problem [Profile.Validate] reports.
var ErrInvalidProfile = errors.New("replica: invalid profile")

// Profile is the performance model of one (GPU, model) pair served by a
// vLLM-like engine: how long a step takes and how much KV cache there is.
//
// The time of one step (one forward pass of the batch) is
//
//	Overhead + Floor + max(0, tokens-FloorTokens)*PerToken
//	         + PerContextToken * (sum of the context lengths of the decoding sequences)
//
// where tokens is the number of tokens scheduled in the step (prefill
// chunks plus one per decoding sequence): below FloorTokens a step is
// memory-bound (it reads every weight once whatever the batch), above it
// compute grows linearly; attention of decoding sequences reads their whole
// KV cache, hence the context term. A Profile is a value; the zero values of
// BlockSize, MaxSeqs and MaxBatchedTokens mean the package defaults.
type Profile struct {
	// Name identifies the profile, "model/gpu", e.g. "llama-3-8b/h100".
	Name string
	// Source says where the numbers come from and which are estimates.
	Source string
	// FloorTokens is the largest step, in tokens, that costs only Floor;
	// >= 0.
	FloorTokens int
	// Floor is the compute time of a step of at most FloorTokens tokens
	// (reading the weights once); > 0.
	Floor time.Duration
	// PerToken is the time each token beyond FloorTokens adds; >= 0.
	PerToken time.Duration
	// PerContextToken is the time each context token of a decoding
	// sequence adds (attention reading its KV cache); >= 0.
	PerContextToken time.Duration
	// Overhead is the fixed per-step cost outside the forward pass
	// (scheduling, sampling, detokenizing); >= 0.
	Overhead time.Duration
	// KVBytesPerToken is the KV cache size of one token, in bytes, over
	// all GPUs of the replica; > 0.
	KVBytesPerToken int64
	// KVCacheBytes is the memory given to the KV cache, in bytes, over all
	// GPUs of the replica; > 0, at least one block.
	KVCacheBytes int64
	// BlockSize is the KV cache block size in tokens; 0 means
	// DefaultBlockSize.
	BlockSize int
	// MaxSeqs is the most sequences in one step (running requests); 0
	// means DefaultMaxSeqs.
	MaxSeqs int
	// MaxBatchedTokens is the token budget of one step; 0 means
	// DefaultMaxBatchedTokens.
	MaxBatchedTokens int
}

// Validate reports every problem of p at once (errors.Join), each wrapping
// [ErrInvalidProfile] and naming the field.
func (p Profile) Validate() error {
	var errs []error
	bad := func(field string, v any, want string) {
		errs = append(errs, fmt.Errorf("%w %q: %s %v: %s", ErrInvalidProfile, p.Name, field, v, want))
	}
	if p.Name == "" {
		bad("Name", `""`, "required")
	}
	if p.FloorTokens < 0 {
		bad("FloorTokens", p.FloorTokens, "want >= 0")
	}
	if p.Floor <= 0 {
		bad("Floor", p.Floor, "want > 0")
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"PerToken", p.PerToken}, {"PerContextToken", p.PerContextToken}, {"Overhead", p.Overhead}} {
		if d.v < 0 {
			bad(d.field, d.v, "want >= 0")
		}
	}
	if p.KVBytesPerToken <= 0 {
		bad("KVBytesPerToken", p.KVBytesPerToken, "want > 0")
	}
	if p.KVCacheBytes <= 0 {
		bad("KVCacheBytes", p.KVCacheBytes, "want > 0")
	}
	for _, f := range []struct {
		field string
		v     int
	}{{"BlockSize", p.BlockSize}, {"MaxSeqs", p.MaxSeqs}, {"MaxBatchedTokens", p.MaxBatchedTokens}} {
		if f.v < 0 {
			bad(f.field, f.v, "want >= 0 (0: the default)")
		}
	}
	if len(errs) == 0 && p.KVBlocks() < 1 {
		bad("KVCacheBytes", p.KVCacheBytes, fmt.Sprintf("want at least one block of %d tokens of %d bytes",
			p.withDefaults().BlockSize, p.KVBytesPerToken))
	}
	return errors.Join(errs...)
}

// KVBlocks is the number of KV cache blocks: KVCacheBytes over the size of
// one block (BlockSize tokens of KVBytesPerToken bytes), rounded down; 0 if
// the sizes are not positive.
func (p Profile) KVBlocks() int {
	p = p.withDefaults()
	per := p.KVBytesPerToken * int64(p.BlockSize)
	if per <= 0 || p.KVCacheBytes <= 0 {
		return 0
	}
	return int(p.KVCacheBytes / per)
}

// KVTokens is the KV cache capacity in tokens: KVBlocks * BlockSize.
func (p Profile) KVTokens() int { return p.KVBlocks() * p.withDefaults().BlockSize }

// StepTime is the duration of a step that schedules tokens tokens (>= 0)
// whose decoding sequences have context tokens of context in total (>= 0),
// by the formula in the [Profile] doc.
func (p Profile) StepTime(tokens, context int) time.Duration {
	t := p.Overhead + p.Floor
	if extra := tokens - p.FloorTokens; extra > 0 {
		t += time.Duration(extra) * p.PerToken
	}
	return t + time.Duration(context)*p.PerContextToken
}

// withDefaults returns p with the zero scheduler limits replaced by the
// package defaults.
func (p Profile) withDefaults() Profile {
	if p.BlockSize == 0 {
		p.BlockSize = DefaultBlockSize
	}
	if p.MaxSeqs == 0 {
		p.MaxSeqs = DefaultMaxSeqs
	}
	if p.MaxBatchedTokens == 0 {
		p.MaxBatchedTokens = DefaultMaxBatchedTokens
	}
	return p
}
