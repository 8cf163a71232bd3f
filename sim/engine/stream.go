package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
)

// sseWriter writes server-sent events, flushing each one.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// send writes v as one "data: <json>" event and flushes it.
func (e *sseWriter) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("engine: encode event: %w", err)
	}
	return e.raw(b)
}

// raw writes data as one event and flushes it.
func (e *sseWriter) raw(data []byte) error {
	buf := make([]byte, 0, len(data)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	if _, err := e.w.Write(buf); err != nil {
		return fmt.Errorf("engine: write event: %w", err)
	}
	if err := e.rc.Flush(); err != nil {
		return fmt.Errorf("engine: flush event: %w", err)
	}
	return nil
}

// stream answers a generation as an SSE stream: one chunk per token (the
// first chunk of a chat choice carries the role), one final chunk per choice
// with its finish_reason, a usage chunk if asked, then "data: [DONE]". If
// the client goes or the generation ends early the stream just stops,
// without [DONE].
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, job genJob, tr *genTracker,
	tokens <-chan choiceToken, base completionObject,
) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	sse := &sseWriter{w: w, rc: http.NewResponseController(w)}
	if job.chat {
		base.Object = "chat.completion.chunk"
	}
	fail := func(err error) { s.opts.Logger.DebugContext(ctx, "engine: stream ended", "err", err) }
	if err := sse.rc.Flush(); err != nil { // headers out before the first token
		fail(err)
		return
	}
	for t := range tokens {
		tr.token(t.choice)
		if err := sse.send(chunk(base, job.chat, t.choice, tr.counts[t.choice] == 1, &t.Text, nil)); err != nil {
			fail(err)
			return
		}
	}
	if !tr.complete() {
		fail(fmt.Errorf("generation incomplete: %w", context.Cause(ctx)))
		return
	}
	for i := range job.prompts {
		if err := sse.send(chunk(base, job.chat, i, false, nil, ptr(finishLength))); err != nil {
			fail(err)
			return
		}
	}
	if job.includeUsage {
		base.Choices = []any{}
		base.Usage = tr.usage()
		if err := sse.send(base); err != nil {
			fail(err)
			return
		}
	}
	tr.finish() // before the client can see the end
	if err := sse.raw([]byte("[DONE]")); err != nil {
		fail(err)
	}
}

// chunk is a streaming chunk for one choice with text (nil: none) and
// finish reason (nil: not finished); first marks a chat choice's first chunk.
func chunk(base completionObject, chat bool, choice int, first bool, text, finish *string) completionObject {
	if !chat {
		c := textChoice{Index: choice, FinishReason: finish}
		if text != nil {
			c.Text = *text
		}
		base.Choices = []textChoice{c}
		return base
	}
	c := chatChunkChoice{Index: choice, Delta: chatDelta{Content: text}, FinishReason: finish}
	if first {
		c.Delta.Role = "assistant"
	}
	base.Choices = []chatChunkChoice{c}
	return base
}
