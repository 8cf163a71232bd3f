package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.yaml.in/yaml/v3"
)

// Load reads, decodes and validates the configuration file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes YAML strictly over [Default], fills per-item defaults and
// validates. A decode error names the line; a validation error joins every
// problem found (see [Config.Validate]).
func Parse(data []byte) (*Config, error) {
	c, err := Decode(data)
	if err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Decode decodes YAML strictly over [Default] and fills per-item defaults,
// without validating. Unknown fields, wrong types and a second YAML
// document are errors.
func Decode(data []byte) (*Config, error) {
	c := Default()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		var te *yaml.TypeError
		switch {
		case errors.Is(err, io.EOF):
			return nil, errors.New("decode: the file is empty")
		case errors.As(err, &te):
			// One error per problem, each naming its line.
			errs := make([]error, len(te.Errors))
			for i, msg := range te.Errors {
				errs[i] = fmt.Errorf("decode: %s", msg)
			}
			return nil, errors.Join(errs...)
		}
		return nil, fmt.Errorf("decode: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("decode: the file holds more than one YAML document")
	}
	c.applyDefaults()
	return c, nil
}

// applyDefaults fills the defaults of list items, which YAML decoding over
// Default cannot reach.
func (c *Config) applyDefaults() {
	for i := range c.Clusters {
		c.Clusters[i].applySignalDefaults()
	}
	for i := range c.Models {
		m := &c.Models[i]
		if m.PromptTokenCost == 0 && m.OutputTokenCost == 0 {
			m.PromptTokenCost, m.OutputTokenCost = DefaultPromptTokenCost, DefaultOutputTokenCost
		}
		if m.ContextTokens == 0 {
			m.ContextTokens = DefaultContextTokens
		}
		if m.MaxOutputTokens == 0 {
			m.MaxOutputTokens = min(DefaultMaxOutputTokens, m.ContextTokens)
		}
	}
	if c.ExtProc.StreamIdleTimeout == 0 {
		c.ExtProc.StreamIdleTimeout = c.Envoy.MessageTimeout + Duration(time.Second)
	}
	for i := range c.Sources {
		s := &c.Sources[i]
		if s.FailMode == "" {
			s.FailMode = FailOpen
		}
		if s.Routing == "" {
			s.Routing = RoutingDraw
		}
		if s.DefaultModel == "" && len(c.Models) > 0 {
			s.DefaultModel = c.Models[0].Name
		}
		if s.DefaultPriority == "" {
			s.DefaultPriority = "standard"
		}
	}
}
