package admin

import (
	"net/url"

	"github.com/ilbproject/ilb/internal/bound"
	"github.com/ilbproject/ilb/xds"
)

// nodeQuery reads /debug/xds's query: source (one source's Envoys),
// limit (1..xds.MaxNodeLimit, default xds.DefaultNodeLimit) and, with a
// source, after (the last node id of the previous page).
func nodeQuery(q url.Values) (xds.NodeQuery, error) {
	n, err := intParam(q, "limit", xds.DefaultNodeLimit, xds.MaxNodeLimit)
	if err != nil {
		return xds.NodeQuery{}, err
	}
	return xds.NodeQuery{
		Source: bound.String(q.Get("source"), bound.Name),
		After:  bound.String(q.Get("after"), bound.Name),
		Limit:  n,
	}, nil
}
