package ha

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/ilbproject/ilb/internal/bound"
)

// Store is a small key/value store in the backend (etcd: under
// P state/<namespace>/; Kubernetes: one ConfigMap per namespace) for
// state that must outlive every replica: the xDS server's banned
// versions and rollout state. Keys are grouped by namespace (one per
// user, such as "xds-bans"). Values are opaque bytes. Writes are not
// guarded by the leadership unless made with PutIfLeader. Every call
// takes at most ha.dial_timeout (or ctx's deadline, if sooner). Safe for
// concurrent use.
type Store struct{ r *Replica }

// Store returns the replica's key/value store.
func (r *Replica) Store() *Store { return &Store{r: r} }

// Bounds of the store.
const (
	// MaxStoreValue is the largest value, in bytes.
	MaxStoreValue = 256 << 10
	// MaxStoreList is the most entries List returns.
	MaxStoreList = 10000
)

// storeName is a namespace or a key: 1-128 letters, digits, '.', '_',
// '-', ':' or '/' (not leading, no "//").
var storeName = regexp.MustCompile(`^[A-Za-z0-9._:-][A-Za-z0-9._:/-]{0,127}$`)

func checkStoreName(kind, s string) error {
	if !storeName.MatchString(s) || strings.Contains(s, "//") || strings.HasSuffix(s, "/") {
		return fmt.Errorf("ha: store %s %s: want 1-128 letters, digits, '.', '_', ':', '-' or inner '/'", kind, bound.Quote(s, bound.Excerpt))
	}
	return nil
}

func checkStoreKey(ns, key string) error {
	if err := checkStoreName("namespace", ns); err != nil {
		return err
	}
	if strings.Contains(ns, "/") {
		return fmt.Errorf("ha: store namespace %s: no '/' in a namespace", bound.Quote(ns, bound.Excerpt))
	}
	return checkStoreName("key", key)
}

func checkStoreValue(ns, key string, value []byte) error {
	if len(value) > MaxStoreValue {
		return fmt.Errorf("ha: store %s/%s: value of %d bytes: want at most %d", ns, key, len(value), MaxStoreValue)
	}
	return nil
}

// Put sets key in namespace ns to value.
func (s *Store) Put(ctx context.Context, ns, key string, value []byte) error {
	if err := errors.Join(checkStoreKey(ns, key), checkStoreValue(ns, key, value)); err != nil {
		return err
	}
	if err := s.r.b.put(ctx, nil, ns, key, value); err != nil {
		return fmt.Errorf("ha: store %s/%s: %w", ns, key, err)
	}
	return nil
}

// PutIfLeader sets key like Put, only while this replica leads: the
// backend refuses the write (ErrFenced; ErrNotLeader when the replica
// knows it does not lead) once its term has ended.
func (s *Store) PutIfLeader(ctx context.Context, ns, key string, value []byte) error {
	if err := errors.Join(checkStoreKey(ns, key), checkStoreValue(ns, key, value)); err != nil {
		return err
	}
	t := s.r.term.Load()
	if t == nil {
		return fmt.Errorf("ha: store %s/%s: %w", ns, key, ErrNotLeader)
	}
	if err := s.r.b.put(ctx, t, ns, key, value); err != nil {
		return fmt.Errorf("ha: store %s/%s: %w", ns, key, err)
	}
	return nil
}

// Get returns the value of key in ns; ok is false when there is none.
func (s *Store) Get(ctx context.Context, ns, key string) (value []byte, ok bool, err error) {
	if err := checkStoreKey(ns, key); err != nil {
		return nil, false, err
	}
	v, ok, err := s.r.b.get(ctx, ns, key)
	if err != nil {
		return nil, false, fmt.Errorf("ha: store %s/%s: %w", ns, key, err)
	}
	return v, ok, nil
}

// List returns up to MaxStoreList entries of ns by key, and whether there
// were more.
func (s *Store) List(ctx context.Context, ns string) (entries map[string][]byte, more bool, err error) {
	if err := checkStoreKey(ns, "x"); err != nil {
		return nil, false, err
	}
	out, more, err := s.r.b.list(ctx, ns)
	if err != nil {
		return nil, false, fmt.Errorf("ha: store %s: %w", ns, err)
	}
	return out, more, nil
}

// Delete removes key from ns (nothing when it is absent).
func (s *Store) Delete(ctx context.Context, ns, key string) error {
	if err := checkStoreKey(ns, key); err != nil {
		return err
	}
	if err := s.r.b.del(ctx, ns, key); err != nil {
		return fmt.Errorf("ha: store %s/%s: %w", ns, key, err)
	}
	return nil
}
