package openai

import "encoding/json"

// Model is one model of the OpenAI model list (GET /v1/models) and of a
// model's retrieval (GET /v1/models/{id}), with the fields the official
// SDKs read and two vLLM adds that UIs use: Root, the model an alias
// stands for, and MaxModelLen, its context in tokens.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // always "model"
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	Root    string `json:"root,omitempty"`
	// Parent is a LoRA adapter's base model (vLLM lists adapters so).
	Parent      string `json:"parent,omitempty"`
	MaxModelLen int    `json:"max_model_len,omitempty"`
}

// ModelObject is Model.Object.
const ModelObject = "model"

// ModelList is the JSON body of the model list: {"object": "list",
// "data": [models...]} ("data" is [] when there are none, never null).
func ModelList(models []Model) []byte {
	if models == nil {
		models = []Model{}
	}
	return mustJSON(struct {
		Object string  `json:"object"`
		Data   []Model `json:"data"`
	}{"list", models})
}

// ModelBody is the JSON body of one model's retrieval.
func ModelBody(m Model) []byte { return mustJSON(m) }

// mustJSON marshals v, made of strings and numbers only: it cannot fail.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("openai: marshal a body of strings and numbers: " + err.Error())
	}
	return b
}
