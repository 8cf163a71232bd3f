package engine

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// readBody reads a request body of at most maxBodyBytes; on failure it has
// answered (413 or 400) and returns false.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err == nil {
		return body, true
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		e := badRequest(codeTooLarge, "", "request body larger than %d bytes", mbe.Limit)
		e.Status = http.StatusRequestEntityTooLarge
		s.writeError(w, e)
	} else {
		s.writeError(w, badRequest(codeInvalidJSON, "", "reading request body: %v", err))
	}
	return nil, false
}

// checkModel answers 404 and returns false if model is not served here.
// Else it returns the LoRA adapter the request uses ("" for one of the
// Models) and the model name that labels its metrics: the model asked for,
// or for an adapter the primary model (vLLM labels every series with its
// served model name, whatever the adapter).
func (s *Server) checkModel(w http.ResponseWriter, model string) (adapter, label string, ok bool) {
	if slices.Contains(s.opts.Models, model) {
		return "", model, true
	}
	if slices.Contains(s.opts.Adapters, model) {
		return model, s.opts.Models[0], true
	}
	e := badRequest(codeModelNotFound, "model", "The model `%s` does not exist.", model)
	e.Status = http.StatusNotFound
	s.writeError(w, e)
	return "", "", false
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	s.handleGenerate(w, r, decodeChat)
}

func (s *Server) handleCompletion(w http.ResponseWriter, r *http.Request) {
	s.handleGenerate(w, r, decodeCompletion)
}

// handleGenerate serves a chat or completions request: one Backend
// generation per prompt, answered as one JSON object or as an SSE stream.
func (s *Server) handleGenerate(w http.ResponseWriter, r *http.Request, decode func([]byte) (genJob, *apiError)) {
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	job, e := decode(body)
	if e != nil {
		s.writeError(w, e)
		return
	}
	adapter, label, ok := s.checkModel(w, job.model)
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel() // stops the generations when the handler returns early
	tr := newGenTracker(s.metrics, s.opts.Now, job, label)
	chans := make([]<-chan Token, 0, len(job.prompts))
	for _, p := range job.prompts {
		ch, err := s.opts.Backend.Generate(ctx, GenRequest{Model: job.model, Adapter: adapter, PromptTokens: p, MaxTokens: job.maxTokens})
		if err != nil {
			clientGone := ctx.Err() != nil
			cancel()
			if !clientGone {
				s.opts.Logger.ErrorContext(ctx, "engine: backend generate", "err", err)
				s.writeError(w, serverError(fmt.Errorf("backend: %w", err)))
			}
			return
		}
		chans = append(chans, ch)
	}
	defer tr.finish() // counts an abort if not finished
	base := completionObject{
		ID:                "cmpl-" + rand.Text(),
		Object:            "text_completion",
		Created:           tr.start.Unix(),
		Model:             job.model,
		SystemFingerprint: s.opts.Name,
	}
	if job.chat {
		base.ID = "chat" + base.ID
		base.Object = "chat.completion"
	}
	tokens := mergeTokens(ctx, chans)
	if job.stream {
		s.stream(ctx, w, job, tr, tokens, base)
		return
	}
	texts := make([]strings.Builder, len(job.prompts))
	for t := range tokens {
		tr.token(t.choice)
		texts[t.choice].WriteString(t.Text)
	}
	if !tr.complete() {
		if ctx.Err() == nil {
			s.writeError(w, serverError(errors.New("backend ended the generation early")))
		}
		return
	}
	if job.chat {
		base.Choices = []chatChoice{{
			Message:      assistantMessage{Role: "assistant", Content: texts[0].String()},
			FinishReason: finishLength,
		}}
	} else {
		choices := make([]textChoice, len(texts))
		for i := range texts {
			choices[i] = textChoice{Index: i, Text: texts[i].String(), FinishReason: ptr(finishLength)}
		}
		base.Choices = choices
	}
	base.Usage = tr.usage()
	tr.finish() // before the client can see the response
	if err := writeJSON(w, http.StatusOK, base); err != nil {
		s.opts.Logger.DebugContext(ctx, "engine: write completion", "err", err)
	}
}

// choiceToken is a token of choice (prompt) number choice.
type choiceToken struct {
	choice int
	Token
}

// mergeTokens fans the token channels in, tagging each token with the index
// of its channel; the result closes when every input has closed or ctx ends.
func mergeTokens(ctx context.Context, chans []<-chan Token) <-chan choiceToken {
	out := make(chan choiceToken)
	var wg sync.WaitGroup
	for i, ch := range chans {
		wg.Go(func() {
			for {
				select {
				case t, ok := <-ch:
					if !ok {
						return
					}
					select {
					case out <- choiceToken{choice: i, Token: t}:
					case <-ctx.Done():
						return
					}
				case <-ctx.Done():
					return
				}
			}
		})
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	return out
}

// handleModels lists the models, then the LoRA adapters with their base
// model as parent (as vLLM's /v1/models).
func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	list := modelList{Object: "list", Data: make([]modelCard, 0, len(s.opts.Models)+len(s.opts.Adapters))}
	created := s.opts.Now().Unix()
	for _, m := range slices.Concat(s.opts.Models, s.opts.Adapters) {
		list.Data = append(list.Data, s.modelCard(m, created))
	}
	if err := writeJSON(w, http.StatusOK, list); err != nil {
		s.opts.Logger.DebugContext(r.Context(), "engine: write models", "err", err)
	}
}

// handleModel is GET /v1/models/{id}: the served model's card, or the
// OpenAI 404 for a model the replica does not serve. Model ids may hold
// slashes (org/name).
func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !slices.Contains(s.opts.Models, id) && !slices.Contains(s.opts.Adapters, id) {
		e := badRequest(codeModelNotFound, "model", "the model %q does not exist", id)
		e.Status = http.StatusNotFound
		s.writeError(w, e)
		return
	}
	card := s.modelCard(id, s.opts.Now().Unix())
	if err := writeJSON(w, http.StatusOK, card); err != nil {
		s.opts.Logger.DebugContext(r.Context(), "engine: write model", "err", err)
	}
}

// modelCard is the card of model id, a model or a LoRA adapter (whose
// parent is the primary model).
func (s *Server) modelCard(id string, created int64) modelCard {
	c := modelCard{ID: id, Object: "model", Created: created, OwnedBy: "ilb-sim"}
	if !slices.Contains(s.opts.Models, id) {
		c.Parent = s.opts.Models[0]
	}
	return c
}

// serverError is a 500 apiError.
func serverError(err error) *apiError {
	return &apiError{Status: http.StatusInternalServerError, Message: err.Error(), Type: "server_error", Code: codeServerError}
}

func ptr[T any](v T) *T { return &v }
