package envoy

import (
	"strings"
	"testing"
)

// TestDecodeErrorsNameYAMLLines: a decoding error names the YAML line and
// the field path where the problem is, not the position in the JSON ILB
// decodes through.
func TestDecodeErrorsNameYAMLLines(t *testing.T) {
	bootstrap := `node:
  id: n1
  cluster: edge-us
static_resources:
  clusters:
  - name: a
    connect_timeout: 1s
  - name: b
    conect_timeout: 1s
`
	resources := `clusters:
- name: a
  connect_timeout: 1s
- name: b
  type: STRICT_DNZ
`
	badType := `admin:
  address:
    socket_address:
      address: 127.0.0.1
      port_value: ninety
`
	for _, tc := range []struct {
		name, doc string
		want      string
	}{
		{"an unknown field in a bootstrap", bootstrap, `(line 9, static_resources.clusters[1].conect_timeout): unknown field "conect_timeout"`},
		{"an enum typo in a resource file", resources, `(line 5, clusters[1].type)`},
		{"a value of the wrong type", badType, `(line 5, admin.address.socket_address.port_value)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeBundle([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v; want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "line 1:") {
				t.Errorf("err %v names a JSON position", err)
			}
		})
	}
}

// TestJSONPathAt: the path of the token at an offset.
func TestJSONPathAt(t *testing.T) {
	js := []byte(`{"a":{"b":[1,{"c":true}],"d":"x"},"e":[[0,1],[2]]}`)
	for _, tc := range []struct {
		at   string // the token's text, found first at its offset
		want string
	}{
		{`"b"`, "a.b"},
		{`"c"`, "a.b[1].c"},
		{`true`, "a.b[1].c"},
		{`"x"`, "a.d"},
		{`[2]`, "e[1]"},
	} {
		got := pathString(jsonPathAt(js, strings.Index(string(js), tc.at)))
		if got != tc.want {
			t.Errorf("at %s: %s; want %s", tc.at, got, tc.want)
		}
	}
}

// TestValidateOneLinePerProblem: one bad port is one problem, at its own
// path, not one more per enclosing message.
func TestValidateOneLinePerProblem(t *testing.T) {
	b, err := DecodeBundle([]byte(`static_resources:
  clusters:
  - name: a
    connect_timeout: 1s
    load_assignment:
      cluster_name: a
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: {address: 127.0.0.1, port_value: 99999}
`))
	if err != nil {
		t.Fatal(err)
	}
	errs := flatten(Validate(b.Bootstrap))
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "Bootstrap.static_resources.clusters[0].load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address: invalid SocketAddress.PortValue") {
		t.Errorf("problems %v; want one, at the socket address", errs)
	}
}
