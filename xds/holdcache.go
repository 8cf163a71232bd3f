package xds

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
)

// holdingCache is go-control-plane's snapshot cache with one change for
// state-of-the-world streams: a node is never answered with the version
// of a type it last rejected while its key's snapshot still holds that
// version.
//
// Why: go-control-plane's SOTW server hands every request to CreateWatch,
// which answers at once when the request's version_info differs from the
// snapshot's, and opens a watch (answered by the next SetSnapshot that
// changes the type's version) when they are equal. Envoy's NACK carries
// the version it last accepted, so without this the rejected version
// would be sent straight back, NACKed again, and so on: thousands of
// round trips a second. CreateWatch here passes such a request on with
// version_info set to the rejected version, so the cache opens a watch
// and the node gets nothing new of that type until the content of its
// key changes. This covers the NACK itself and any later request of that
// type from the node (a subscription change, say). A new
// stream of the node starts with no resources returned, so it is
// answered once, as go-control-plane answers any new subscription.
//
// Delta streams need no such change: go-control-plane records the
// versions of every resource it sent, NACKed or not, and answers only
// resources whose version differs from them.
type holdingCache struct {
	cache.SnapshotCache
	key nodeKey
	// heldOn is the version of a type the node last rejected and still
	// holds, "" if none.
	heldOn func(node *corev3.Node, typeURL string) string
}

var _ cache.SnapshotCache = (*holdingCache)(nil)

// CreateWatch opens a watch, or answers at once, as the snapshot cache
// does, but as if a node held on a type ran the version it rejected (see
// holdingCache). The request belongs to the calling stream's goroutine
// until the cache stores it with the watch, so it is changed in place;
// go-control-plane reads version_info nowhere else.
func (c *holdingCache) CreateWatch(req *cache.Request, sub cache.Subscription, out chan cache.Response) (func(), error) {
	if v := c.heldOn(req.GetNode(), req.GetTypeUrl()); v != "" && req.GetVersionInfo() != v {
		if snap, err := c.GetSnapshot(c.key.ID(req.GetNode())); err == nil && snap.GetVersion(req.GetTypeUrl()) == v {
			req.VersionInfo = v
		}
	}
	return c.SnapshotCache.CreateWatch(req, sub, out)
}
