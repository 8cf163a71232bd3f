package ha

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/internal/bound"
)

// keys is the key layout under one prefix (see the package doc).
type keys struct{ prefix string }

func (k keys) election() string            { return k.prefix + "election" }
func (k keys) current() string             { return k.prefix + "current" }
func (k keys) history() string             { return k.prefix + "history/" }
func (k keys) historyAt(seq uint64) string { return fmt.Sprintf("%s%020d", k.history(), seq) }
func (k keys) versions() string            { return k.prefix + "versions/" }
func (k keys) version(v string) string     { return k.versions() + v + "/" }
func (k keys) meta(v string) string        { return k.version(v) + "meta" }
func (k keys) chunk(v string, i int) string {
	return fmt.Sprintf("%sc/%06d", k.version(v), i)
}
func (k keys) demand() string              { return k.prefix + "demand/" }
func (k keys) demandOf(name string) string { return k.demand() + name }
func (k keys) state(ns string) string      { return k.prefix + "state/" + ns + "/" }

// versionOfKey returns the version a key under versions/ belongs to.
func (k keys) versionOfKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, k.versions())
	if !ok {
		return "", false
	}
	v, _, ok := strings.Cut(rest, "/")
	return v, ok && versionPattern.MatchString(v)
}

// versionPattern is a weights version: the content hash, 16 hex digits.
var versionPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)

// record says which version a leader published, when, and with what.
// P current holds the newest; P history/<seq> each of the last ones.
type record struct {
	Version string `json:"version"`
	// Seq numbers publications: one more than the one before, across
	// leaders.
	Seq       uint64    `json:"seq"`
	Published time.Time `json:"published"` // the leader's clock
	Leader    string    `json:"leader"`    // the replica name
	// Config is the hash of the routing part of the leader's
	// configuration (ConfigHash): a replica whose own differs is told.
	Config   string    `json:"config"`
	Policy   string    `json:"policy"`
	Computed time.Time `json:"computed"`
	Status   string    `json:"status,omitempty"`
	// Content names the stored encoding of the version's content where
	// one version may be stored more than once (Kubernetes: the first 16
	// hex digits of its SHA-256); "" with etcd.
	Content string `json:"content,omitempty"`
}

// Bounds of what is read from etcd.
const (
	maxRecordBytes = 16 << 10
	maxStatusBytes = 4 << 10
)

func decodeRecord(b []byte) (record, error) {
	var r record
	if len(b) > maxRecordBytes {
		return r, fmt.Errorf("record of %d bytes: want at most %d", len(b), maxRecordBytes)
	}
	if err := strictJSON(b, &r); err != nil {
		return r, fmt.Errorf("record: %w", err)
	}
	if !versionPattern.MatchString(r.Version) {
		return r, fmt.Errorf("record: version %s is not a weights version (16 hex digits)", bound.Quote(r.Version, bound.Excerpt))
	}
	if r.Content != "" && !versionPattern.MatchString(r.Content) {
		return r, fmt.Errorf("record: content %s is not a content name (16 hex digits)", bound.Quote(r.Content, bound.Excerpt))
	}
	r.Leader, r.Policy, r.Config = bound.String(r.Leader, bound.Name), bound.String(r.Policy, bound.Name), bound.String(r.Config, bound.Name)
	r.Status = bound.String(r.Status, maxStatusBytes)
	return r, nil
}

// strictJSON decodes one JSON value, refusing unknown fields and
// trailing data.
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// ConfigHash is the hash (16 hex digits) of the part of a configuration
// that decides the weights: regions, network, sources, models, profiles,
// engine clusters and controller. Replicas of one ILB must agree on it;
// listen addresses, TLS files and the ha: section may differ.
func ConfigHash(c *config.Config) string {
	b, err := json.Marshal(struct {
		Regions    []config.Region
		Network    []config.Link
		Sources    []config.Source
		Models     []config.Model
		Profiles   []config.Profile
		Clusters   []config.EngineCluster
		Controller config.Controller
	}{c.Regions, c.Network, c.Sources, c.Models, c.Profiles, c.Clusters, c.Controller})
	if err != nil { // plain data: cannot happen
		return "unhashable: " + err.Error()
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
