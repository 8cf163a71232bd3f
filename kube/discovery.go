package kube

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/signals"
)

// Options configure [New].
type Options struct {
	// Now is the clock of the "since" of stale watches; nil is time.Now.
	Now func() time.Time
	// RESTConfig builds the client configuration of an API server; nil is
	// [RESTConfig] (kubeconfig and context, or in-cluster).
	RESTConfig func(config.KubeAPIServer) (*rest.Config, error)
}

// Discovery is the Kubernetes discovery of one configuration: a
// discoverer per cluster whose discovery.type is kubernetes, over one
// client per API server they name. Build it with [New], hand
// [Discovery.Discoverers] to the signals monitor, and run
// [Discovery.Run] beside it.
type Discovery struct {
	byCluster map[string]runner
	apis      []string
}

// runner is a discoverer with watches to run.
type runner interface {
	signals.Watcher
	Run(ctx context.Context)
}

var (
	_ runner = (*Service)(nil)
	_ runner = (*Pool)(nil)
)

// New builds a discoverer for every cluster of c with kubernetes
// discovery, and a client for every API server they use (none is
// contacted yet). c must be validated. It returns nil, nil when no cluster
// uses Kubernetes.
func New(c *config.Config, o Options) (*Discovery, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.RESTConfig == nil {
		o.RESTConfig = RESTConfig
	}
	byAPI := map[string]*Clients{}
	d := &Discovery{byCluster: map[string]runner{}}
	var errs []error
	for _, e := range c.Clusters {
		k := e.Discovery.Kubernetes
		if e.Discovery.Type != config.DiscoveryKube || k == nil {
			continue
		}
		api, ok := c.KubeAPIServer(k.APIServer)
		if !ok {
			errs = append(errs, fmt.Errorf("cluster %s: unknown API server %q", e.Name, k.APIServer))
			continue
		}
		cl, ok := byAPI[api.Name]
		if !ok {
			rc, err := o.RESTConfig(api)
			if err != nil {
				errs = append(errs, fmt.Errorf("API server %s: %w", api.Name, err))
				continue
			}
			rc = rest.CopyConfig(rc)
			rc.UserAgent = "ilb"
			if cl, err = NewClients(rc); err != nil {
				errs = append(errs, fmt.Errorf("API server %s: %w", api.Name, err))
				continue
			}
			byAPI[api.Name] = cl
			d.apis = append(d.apis, api.Name)
		}
		if k.Service != "" {
			d.byCluster[e.Name] = NewService(cl, api.Name, *k, o.Now)
		} else {
			d.byCluster[e.Name] = NewPool(cl, api.Name, *k, o.Now)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("kubernetes discovery: %w", err)
	}
	if len(d.byCluster) == 0 {
		return nil, nil
	}
	return d, nil
}

// RESTConfig is the client configuration of an API server: its
// kubeconfig file and context, or the in-cluster configuration.
func RESTConfig(a config.KubeAPIServer) (*rest.Config, error) {
	if a.Kubeconfig == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster configuration (ILB is not in a pod? give kubernetes.api_servers[].kubeconfig): %w", err)
		}
		return rc, nil
	}
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: a.Kubeconfig}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: a.Context}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s (context %q): %w", a.Kubeconfig, a.Context, err)
	}
	return rc, nil
}

// Discoverers returns the discoverer of each cluster with kubernetes
// discovery, by cluster name (signals.Options.Discoverers).
func (d *Discovery) Discoverers() map[string]signals.Discoverer {
	out := make(map[string]signals.Discoverer, len(d.byCluster))
	for name, r := range d.byCluster {
		out[name] = r
	}
	return out
}

// APIServers names the API servers in use, in the order clusters first
// name them.
func (d *Discovery) APIServers() []string { return d.apis }

// Run runs every watch until ctx is done, then returns nil.
func (d *Discovery) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, r := range d.byCluster {
		wg.Go(func() { r.Run(ctx) })
	}
	wg.Wait()
	return nil
}
