package envoy

import (
	"errors"
	"fmt"
	"os"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

// DecodeYAML decodes a YAML (or JSON) document into msg strictly: unknown
// fields are errors, and every Any must name a type known to this binary
// (see registry.go). It does not validate; call [Validate] next.
func DecodeYAML(data []byte, msg proto.Message) error {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return fmt.Errorf("yaml: %w", err)
	}
	if string(js) == "null" {
		return errors.New("the document is empty")
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(js, msg); err != nil {
		return fmt.Errorf("decode %s: %w", msg.ProtoReflect().Descriptor().FullName(), inYAML(err, data, js, nil))
	}
	return nil
}

// LoadYAML reads path, decodes it into msg with [DecodeYAML] and checks it
// with [Validate].
func LoadYAML(path string, msg proto.Message) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read envoy config: %w", err)
	}
	if err := DecodeYAML(data, msg); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := Validate(msg); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
