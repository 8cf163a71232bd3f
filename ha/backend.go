package ha

import (
	"context"

	"github.com/ilbproject/ilb/weights"
)

// backend is where an HA group keeps what its replicas share and elects
// its leader: etcd (etcd*.go) or a Kubernetes API server (kube*.go).
// The Replica holds what does not depend on it: installing, the
// controller's term, the demand sum, the store's rules, status and
// metrics. Every method is safe for concurrent use and bounded by the
// replica's request timeout or ctx.
type backend interface {
	// kind names the backend in logs and Status ("etcd", "kubernetes").
	kind() string
	// run keeps this replica's session and campaigns with it (each term
	// it wins runs through Replica.runTerm), wakes the sync loop when the
	// record of the version in force changes (Replica.wakeSync), keeps
	// every replica's demand share (Replica.takeShare, dropShare) and
	// writes this replica's (Replica.runDemandShare calls writeShare),
	// until ctx is done; on the way out it gives up its leadership and
	// session at once.
	run(ctx context.Context) error
	// readCurrent reads the record of the version in force (nil when
	// there is none yet), a token that changes whenever the record is
	// written, and the leader's name ("" when none). An error means the
	// backend did not answer: the replica is fail-static.
	readCurrent(ctx context.Context) (current, error)
	// fetch reads and decodes the content rec names (its version, and
	// its stored encoding where the backend keeps several); a failure to
	// read is wrapped with errRetry, a content that is not rec's is not.
	fetch(ctx context.Context, rec record) (*weights.Weights, error)
	// history reads up to n records of the last publications, newest
	// first.
	history(ctx context.Context, n int) ([][]byte, error)
	// write publishes rec (the term's next record, naming w) with w's
	// content, fenced: once the term has ended the backend itself
	// refuses it (ErrFenced). It may fill rec.Content.
	write(ctx context.Context, t *term, rec record, w *weights.Weights) error
	// collect deletes what no kept history record names (best effort).
	collect(ctx context.Context, t *term)
	// writeShare stores this replica's demand share (Share.Encode).
	writeShare(ctx context.Context, b []byte) error
	// The Store's operations on checked names; with t set, put is fenced
	// by t as write is.
	put(ctx context.Context, t *term, ns, key string, value []byte) error
	get(ctx context.Context, ns, key string) ([]byte, bool, error)
	list(ctx context.Context, ns string) (map[string][]byte, bool, error)
	del(ctx context.Context, ns, key string) error
	// close releases what New opened (after run returned).
	close() error
}

// current is what readCurrent returns.
type current struct {
	rec    []byte // nil: no version published yet
	token  string
	leader string
}
