package workload

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestReadAzureCSV(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Row
	}{
		{
			name: "azure header and fractional seconds",
			in: "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
				"2023-11-16 18:15:46.6805900,374,44\n" +
				"2023-11-16 18:15:50.9951690,396,109\n",
			want: []Row{{At: 0, Input: 374, Output: 44}, {At: 4314579 * time.Microsecond, Input: 396, Output: 109}},
		},
		{
			name: "columns reordered, extra column, case, BOM, CRLF, no final newline",
			in: "\ufeffgeneratedtokens,Extra,timestamp,CONTEXTTOKENS\r\n" +
				"7,x,2023-11-16 00:00:00,10\r\n" +
				"0,y,2023-11-16 00:00:01.5,0",
			want: []Row{{At: 0, Input: 10, Output: 7}, {At: 1500 * time.Millisecond, Input: 0, Output: 0}},
		},
		{
			name: "unsorted rows come back sorted, relative to the earliest",
			in: "TIMESTAMP,ContextTokens,GeneratedTokens\n" +
				"2023-11-16 00:00:02,2,2\n" +
				"2023-11-16 00:00:00,0,0\n" +
				"2023-11-16 00:00:01,1,1\n",
			want: []Row{{At: 0}, {At: time.Second, Input: 1, Output: 1}, {At: 2 * time.Second, Input: 2, Output: 2}},
		},
		{
			name: "header only",
			in:   "TIMESTAMP,ContextTokens,GeneratedTokens\n",
			want: nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadAzureCSV(strings.NewReader(tt.in))
			if err != nil {
				t.Fatalf("ReadAzureCSV: %v", err)
			}
			if !slices.EqualFunc(got, tt.want, rowEqual) {
				t.Errorf("rows %+v, want %+v", got, tt.want)
			}
		})
	}
}

func rowEqual(a, b Row) bool {
	return a.At == b.At && a.Input == b.Input && a.Output == b.Output && slices.Equal(a.HashIDs, b.HashIDs)
}

func TestReadAzureCSVErrors(t *testing.T) {
	const header = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
	const good = "2023-11-16 18:15:46.6805900,374,44\n"
	tests := []struct {
		name      string
		in        string
		line      int
		field     string
		inMessage string
	}{
		{"empty input", "", 1, "", "want the header"},
		{"missing column", "TIMESTAMP,ContextTokens\n" + good, 1, "GeneratedTokens", "column missing"},
		{"bad timestamp", header + good + "16/11/2023 18:15,1,2\n", 3, "TIMESTAMP", `value "16/11/2023 18:15"`},
		{"context not an integer", header + "2023-11-16 18:15:46,12.5,2\n", 2, "ContextTokens", `value "12.5": not an integer`},
		{"negative generated", header + good + good + "2023-11-16 18:15:47,1,-3\n", 4, "GeneratedTokens", "negative"},
		{"too few fields", header + good + "2023-11-16 18:15:47,1\n", 3, "", "wrong number of fields"},
		{"bare quote", header + good + "2023-11-16 18:15:47,1\"2,3\n", 3, "", "bare"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadAzureCSV(strings.NewReader(tt.in))
			checkParseError(t, err, tt.line, tt.field, tt.inMessage)
		})
	}
}

// checkParseError checks that err is a *ParseError of that line and field
// whose message names them and contains inMessage.
func checkParseError(t *testing.T, err error, line int, field, inMessage string) {
	t.Helper()
	pe, ok := errors.AsType[*ParseError](err)
	if !ok {
		t.Fatalf("error %v (%T), want a *ParseError", err, err)
	}
	if pe.Line != line || pe.Field != field {
		t.Errorf("line %d field %q, want line %d field %q (%v)", pe.Line, pe.Field, line, field, err)
	}
	msg := err.Error()
	for _, want := range []string{"line " + strconv.Itoa(line), field, inMessage} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
}

func TestReadJSONL(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Row
	}{
		{
			name: "mooncake rows",
			in: `{"timestamp": 0, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 2916]}` + "\n" +
				`{"timestamp": 27482, "input_length": 100, "output_length": 1, "hash_ids": [46]}` + "\n",
			want: []Row{
				{At: 0, Input: 6955, Output: 52, HashIDs: []uint64{46, 47, 2916}},
				{At: 27482 * time.Millisecond, Input: 100, Output: 1, HashIDs: []uint64{46}},
			},
		},
		{
			name: "extra keys, no hash_ids, blank lines, fractional and unsorted timestamps",
			in: "\n" + `{"timestamp": 1000.5, "input_length": 3, "output_length": 4, "note": "x", "nested": {"a": [1]}}` + "\n\n" +
				`{"timestamp": 1000, "input_length": 1, "output_length": 2}` + "\n",
			want: []Row{{At: 0, Input: 1, Output: 2}, {At: 500 * time.Microsecond, Input: 3, Output: 4}},
		},
		{name: "empty input", in: "", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadJSONL(strings.NewReader(tt.in))
			if err != nil {
				t.Fatalf("ReadJSONL: %v", err)
			}
			if !slices.EqualFunc(got, tt.want, rowEqual) {
				t.Errorf("rows %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestReadJSONLErrors(t *testing.T) {
	const good = `{"timestamp": 0, "input_length": 1, "output_length": 1}` + "\n"
	tests := []struct {
		name      string
		in        string
		line      int
		field     string
		inMessage string
	}{
		{"timestamp as a string", `{"timestamp": "12", "input_length": 1, "output_length": 1}`, 1, "timestamp", "got string, want a number"},
		{"fractional length", good + `{"timestamp": 1, "input_length": 1.5, "output_length": 1}`, 2, "input_length", "want a non-negative integer"},
		{"missing output_length", good + "\n" + `{"timestamp": 1, "input_length": 1}`, 3, "output_length", "missing"},
		{"null input_length", `{"timestamp": 1, "input_length": null, "output_length": 1}`, 1, "input_length", "missing"},
		{"negative length", good + `{"timestamp": 1, "input_length": 1, "output_length": -2}`, 2, "output_length", "negative"},
		{"negative hash id", `{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [1, -2]}`, 1, "hash_ids", "got number -2, want a non-negative integer"},
		{"hash_ids not an array", `{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": 7}`, 1, "hash_ids", "array of non-negative integers"},
		{"not an object", good + good + `[1, 2]`, 3, "", "not a JSON object"},
		{"broken JSON", good + `{"timestamp": 1,`, 2, "", "not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadJSONL(strings.NewReader(tt.in))
			checkParseError(t, err, tt.line, tt.field, tt.inMessage)
		})
	}
}

func TestLoadTrace(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"a.csv":   "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 00:00:00,5,6\n",
		"b.JSONL": `{"timestamp": 0, "input_length": 5, "output_length": 6}` + "\n",
		"c.txt":   "",
		"d.csv":   "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 00:00:00,x,6\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		file    string
		wantErr string // "" for success
	}{
		{"csv", "a.csv", ""},
		{"jsonl, any case", "b.JSONL", ""},
		{"unknown extension", "c.txt", `unknown extension ".txt"`},
		{"missing file", "none.csv", "no such file"},
		{"bad line names the path", "d.csv", "d.csv: line 2: field ContextTokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, err := LoadTrace(filepath.Join(dir, tt.file))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadTrace: %v", err)
			}
			if want := []Row{{Input: 5, Output: 6}}; !slices.EqualFunc(rows, want, rowEqual) {
				t.Errorf("rows %+v, want %+v", rows, want)
			}
		})
	}
}

// TestAzureTraces checks the measured shape of the Azure LLM inference
// traces 2023 (Azure Public Dataset; Patel et al., Splitwise, ISCA 2024;
// CC-BY 4.0) against the figures of their README.
func TestAzureTraces(t *testing.T) {
	tests := []struct {
		file                         string
		rows                         int
		rate, inMean, inP99, outMean float64 // 0: not checked
		cv1s, cvTolerance            float64
	}{
		{file: "azure-llm-2023-conv.csv", rows: 19366, rate: 5.5, inMean: 1155, inP99: 4142, outMean: 211},
		{file: "azure-llm-2023-code.csv", rows: 8819, rate: 2.6, inMean: 2048, outMean: 28, cv1s: 2.3, cvTolerance: 0.3},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			rows := loadTrace(t, tt.file)
			if len(rows) != tt.rows {
				t.Errorf("%d rows, want %d", len(rows), tt.rows)
			}
			if span := rows[len(rows)-1].At; span < 55*time.Minute || span > 65*time.Minute {
				t.Errorf("span %v, want about an hour", span)
			}
			st := Summarize(asRequests(rows), time.Second)
			near(t, "rate", st.Rate, tt.rate, 0.03)
			near(t, "input mean", st.PromptMean, tt.inMean, 0.01)
			near(t, "output mean", st.OutputMean, tt.outMean, 0.02)
			if tt.inP99 != 0 {
				near(t, "input p99", st.PromptP99, tt.inP99, 0.01)
			}
			if tt.cv1s != 0 && (st.CV1s < tt.cv1s-tt.cvTolerance || st.CV1s > tt.cv1s+tt.cvTolerance) {
				t.Errorf("CV of 1 s counts %.3f, want %.1f ± %.1f", st.CV1s, tt.cv1s, tt.cvTolerance)
			}
		})
	}
}
