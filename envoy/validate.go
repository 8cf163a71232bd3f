package envoy

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// validator is what protoc-gen-validate generates on every Envoy message.
type validator interface {
	ValidateAll() error
}

// Validate runs the protoc-gen-validate rules of msg and of every message
// packed in an Any anywhere inside it, recursively (ValidateAll on a
// message stops at an Any: it checks the type URL, not the content). Every
// problem is reported, each prefixed with the path of the field that holds
// it, such as "filter_chains[0].filters[0].typed_config(HttpConnectionManager)".
func Validate(msg proto.Message) error {
	var errs []error
	validateInto(msg.ProtoReflect(), string(msg.ProtoReflect().Descriptor().Name()), &errs)
	return errors.Join(errs...)
}

func validateInto(m protoreflect.Message, path string, errs *[]error) {
	if v, ok := m.Interface().(validator); ok {
		for _, err := range ownProblems(v.ValidateAll()) {
			*errs = append(*errs, fmt.Errorf("%s: %w", path, err))
		}
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil {
			return true
		}
		name := path + "." + string(fd.Name())
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				visit(l.Get(i).Message(), fmt.Sprintf("%s[%d]", name, i), errs)
			}
		case fd.IsMap():
			if fd.MapValue().Message() == nil {
				return true
			}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				visit(mv.Message(), fmt.Sprintf("%s[%v]", name, k.Interface()), errs)
				return true
			})
		default:
			visit(v.Message(), name, errs)
		}
		return true
	})
}

// embeddedFailed is the reason protoc-gen-validate gives a field whose
// message failed its own rules; the walk reports those where they are.
const embeddedFailed = "embedded message failed validation"

// ownProblems are the problems of err, a ValidateAll result, but those
// of embedded messages, which the walk reports at their own path (one
// line for a bad port, not one per enclosing message).
func ownProblems(err error) []error {
	var multi interface{ AllErrors() []error }
	if err == nil {
		return nil
	}
	if !errors.As(err, &multi) {
		return []error{err}
	}
	var own []error
	for _, e := range multi.AllErrors() {
		if r, ok := e.(interface{ Reason() string }); ok && r.Reason() == embeddedFailed {
			continue
		}
		own = append(own, e)
	}
	return own
}

// visit descends into m, unpacking it first when it is an Any.
func visit(m protoreflect.Message, path string, errs *[]error) {
	a, ok := m.Interface().(*anypb.Any)
	if !ok {
		validateInto(m, path, errs)
		return
	}
	inner, err := a.UnmarshalNew()
	if err != nil {
		*errs = append(*errs, fmt.Errorf("%s: cannot unpack Any %q: %w", path, a.GetTypeUrl(), err))
		return
	}
	validateInto(inner.ProtoReflect(), fmt.Sprintf("%s(%s)", path, inner.ProtoReflect().Descriptor().Name()), errs)
}

// MustAny packs m into an Any; it panics only if m cannot be marshalled,
// which for generated Envoy types means a programming error.
func MustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(fmt.Sprintf("envoy: pack %T: %v", m, err))
	}
	return a
}
