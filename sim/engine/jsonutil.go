package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
)

// unmarshalObject decodes the JSON object raw into v, a pointer to a struct;
// errors name fields relative to path ("" for the request body).
func unmarshalObject(raw []byte, v any, path string) *apiError {
	if path == "" && len(bytes.TrimSpace(raw)) == 0 {
		return badRequest(codeInvalidJSON, "", "request body is empty, want a JSON object")
	}
	if k := jsonKind(raw); k != "object" && k != "invalid" {
		if path == "" {
			return badRequest(codeInvalidJSON, "", "request body must be a JSON object, got JSON %s", describe(raw))
		}
		return badRequest(codeInvalidType, path, "%s: must be a JSON object, got JSON %s", path, describe(raw))
	}
	return unmarshalValue(raw, v, path)
}

// unmarshalValue decodes raw into v and maps decoding errors to apiErrors.
func unmarshalValue(raw []byte, v any, path string) *apiError {
	err := json.Unmarshal(raw, v)
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		param := joinPath(path, te.Field)
		got := te.Value
		if v := valueAt(raw, te.Field); v != nil {
			got = describe(v)
		}
		if param == "" {
			return badRequest(codeInvalidJSON, "", "request body must be a JSON object, got JSON %s", got)
		}
		return badRequest(codeInvalidType, param, "%s: invalid type, got JSON %s, want %s", param, got, jsonTypeName(te.Type))
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return badRequest(codeInvalidJSON, "", "invalid JSON body: %v (at byte offset %d)", se, se.Offset)
	}
	return badRequest(codeInvalidJSON, "", "invalid JSON body: %v", err)
}

// valueAt returns the raw value at the dotted field path (as in
// json.UnmarshalTypeError.Field) inside the JSON object raw, or nil.
func valueAt(raw []byte, field string) []byte {
	if field == "" {
		return nil
	}
	for part := range strings.SplitSeq(field, ".") {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			return nil
		}
		if raw = m[part]; raw == nil {
			return nil
		}
	}
	return raw
}

// describe names a JSON value in a message: its kind and its text,
// shortened to 40 characters.
func describe(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	k := jsonKind(raw)
	if k == "null" {
		return k
	}
	r := []rune(string(raw))
	if len(r) > 40 {
		return k + " " + string(r[:40]) + "…"
	}
	return k + " " + string(r)
}

func joinPath(prefix, field string) string {
	switch {
	case prefix == "":
		return field
	case field == "":
		return prefix
	}
	return prefix + "." + field
}

// jsonKind names the kind of the JSON value raw by its first byte.
func jsonKind(raw []byte) string {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return "null" // absent field
	}
	switch c := raw[0]; {
	case c == '{':
		return "object"
	case c == '[':
		return "array"
	case c == '"':
		return "string"
	case c == 't' || c == 'f':
		return "boolean"
	case c == 'n':
		return "null"
	case c == '-' || (c >= '0' && c <= '9'):
		return "number"
	}
	return "invalid"
}

// jsonTypeName names the JSON type a Go type is decoded from.
func jsonTypeName(t reflect.Type) string {
	if t == nil {
		return "a valid value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "boolean"
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	}
	return t.String()
}
