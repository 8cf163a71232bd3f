package live

import (
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/picker"
)

// Candidates appends to buf the cluster's replicas replica picking may
// choose from (Out == ""), as the picker takes them, and returns it.
func (c Cluster) Candidates(buf []picker.Replica) []picker.Replica {
	for _, r := range c.Replicas {
		if r.Out == "" {
			pr := picker.Replica{Address: r.Address, Ramp: r.Ramp, Saturated: r.Saturated, Running: r.Running, ScrapedAt: r.ScrapedAt, QueueLasting: r.QueueLasting}
			if l := r.LoRA; l != nil {
				pr.Adapters = picker.Adapters{Known: true, Running: l.Running, Waiting: l.Waiting, Max: l.Max}
			}
			buf = append(buf, pr)
		}
	}
	return buf
}

// Prompt is what the request path knows of a request when it picks a
// replica.
type Prompt struct {
	// Tokens is the prompt's estimated length, >= 0.
	Tokens int
	// Read: ILB read the prompt, whose block hashes are Blocks
	// (picker.AppendBlocks; empty when it has no full block). When it was
	// not read, the session, if any, stands for its prefix.
	Read   bool
	Blocks []uint64
	// Session is the session key's draw (0: none); it also orders the
	// picker's ties, so a session's requests agree on them.
	Session uint64
	// MaxTokens is the client's max_tokens (0: unset).
	MaxTokens int
	// Adapter is the LoRA adapter the request names ("" the base model).
	Adapter string
}

// PickerRequest is the replica picker's request for p, a request for
// model m under ext_proc settings ep: its decode work from max_tokens or
// the default output, its tie-breaking draw from the session (rand's when
// there is none).
func PickerRequest(m config.Model, ep config.ExtProc, p Prompt, rand func() uint64) picker.Request {
	req := picker.Request{Blocks: p.Blocks, PromptTokens: p.Tokens, Draw: p.Session, Adapter: p.Adapter}
	if p.Session == 0 {
		req.Draw = rand()
	}
	if !p.Read {
		req.Session = p.Session
	}
	req.DecodeWork = picker.DecodeWork(p.MaxTokens, ep.DefaultOutputTokens, m.PromptTokenCost, m.OutputTokenCost)
	req.DecodeUnit = picker.DecodeWork(0, ep.DefaultOutputTokens, m.PromptTokenCost, m.OutputTokenCost)
	return req
}
