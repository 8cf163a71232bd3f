package ha

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/ilbproject/ilb/weights"
)

// Sizes of a version's content in etcd. etcd refuses a request over
// --max-request-bytes (1.5 MiB by default): a content is cut into chunks
// and written in transactions of at most maxTxnBytes.
const (
	chunkBytes  = 512 << 10
	maxTxnBytes = 1 << 20
	// maxBlobBytes bounds a version's compressed content, maxDocBytes its
	// JSON once decompressed: larger ones are refused, not half-read.
	maxBlobBytes = 64 << 20
	maxDocBytes  = 512 << 20
	// explainCells: a version with at most this many cells carries each
	// cell's explanation (so /debug/weights?explain=1 and ilb explain
	// work on every replica); a larger one does not (explaining every cell
	// of a large fleet costs more than the solve).
	explainCells = 1000
	encodingName = "json+gzip"
)

// meta describes the content of a version: the chunks of its gzip'd JSON.
type meta struct {
	Encoding string `json:"encoding"`
	Chunks   int    `json:"chunks"`
	Size     int    `json:"size"`   // bytes of the compressed content
	SHA256   string `json:"sha256"` // of the compressed content
}

// encodeWeights writes w as the JSON document weights.UnmarshalJSON
// reads (with explanations for a fleet of at most explainCells cells),
// gzip'd.
func encodeWeights(w *weights.Weights) ([]byte, meta, error) {
	var doc []byte
	var err error
	if len(w.Cells()) <= explainCells {
		doc, err = json.Marshal(w.View(nil))
	} else {
		doc, err = json.Marshal(w)
	}
	if err != nil {
		return nil, meta{}, fmt.Errorf("encode weights %s: %w", w.Version(), err)
	}
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write(doc); err != nil {
		return nil, meta{}, fmt.Errorf("encode weights %s: %w", w.Version(), err)
	}
	if err := zw.Close(); err != nil {
		return nil, meta{}, fmt.Errorf("encode weights %s: %w", w.Version(), err)
	}
	if b.Len() > maxBlobBytes {
		return nil, meta{}, fmt.Errorf("weights %s: %d bytes compressed: over the limit of %d", w.Version(), b.Len(), maxBlobBytes)
	}
	sum := sha256.Sum256(b.Bytes())
	return b.Bytes(), meta{Encoding: encodingName, Chunks: (b.Len() + chunkBytes - 1) / chunkBytes, Size: b.Len(), SHA256: hex.EncodeToString(sum[:])}, nil
}

// chunks cuts blob as meta says.
func chunks(blob []byte) [][]byte {
	var out [][]byte
	for len(blob) > 0 {
		n := min(len(blob), chunkBytes)
		out = append(out, blob[:n])
		blob = blob[n:]
	}
	return out
}

// decodeMeta reads a version's meta, checking its bounds.
func decodeMeta(b []byte) (meta, error) {
	var m meta
	if len(b) > maxRecordBytes {
		return m, fmt.Errorf("meta of %d bytes", len(b))
	}
	if err := strictJSON(b, &m); err != nil {
		return m, fmt.Errorf("meta: %w", err)
	}
	switch {
	case m.Encoding != encodingName:
		return m, fmt.Errorf("meta: encoding %q: want %q", m.Encoding, encodingName)
	case m.Size < 1 || m.Size > maxBlobBytes:
		return m, fmt.Errorf("meta: size %d: want 1 to %d bytes", m.Size, maxBlobBytes)
	case m.Chunks != (m.Size+chunkBytes-1)/chunkBytes:
		return m, fmt.Errorf("meta: %d chunks for %d bytes: want %d", m.Chunks, m.Size, (m.Size+chunkBytes-1)/chunkBytes)
	}
	return m, nil
}

// ErrContentMismatch reports a version's content in etcd that is not
// what its key names (its hash, size or weights version differ): it is
// never installed.
var ErrContentMismatch = errors.New("content does not match its version")

// decodeWeights checks the assembled blob against m and decodes it; the
// weights' recomputed content hash must be version.
func decodeWeights(version string, m meta, blob []byte) (*weights.Weights, error) {
	if len(blob) != m.Size {
		return nil, fmt.Errorf("version %s: %w: %d bytes, meta says %d", version, ErrContentMismatch, len(blob), m.Size)
	}
	if sum := sha256.Sum256(blob); hex.EncodeToString(sum[:]) != m.SHA256 {
		return nil, fmt.Errorf("version %s: %w: SHA-256 differs from its meta", version, ErrContentMismatch)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob))
	if err != nil {
		return nil, fmt.Errorf("version %s: %w", version, err)
	}
	doc, err := io.ReadAll(io.LimitReader(zr, maxDocBytes+1))
	if err != nil {
		return nil, fmt.Errorf("version %s: %w", version, err)
	}
	if len(doc) > maxDocBytes {
		return nil, fmt.Errorf("version %s: over %d bytes decompressed", version, maxDocBytes)
	}
	var w weights.Weights
	if err := json.Unmarshal(doc, &w); err != nil {
		return nil, fmt.Errorf("version %s: %w", version, err)
	}
	if w.Version() != version {
		return nil, fmt.Errorf("version %s: %w: its weights hash to %s", version, ErrContentMismatch, w.Version())
	}
	return &w, nil
}
