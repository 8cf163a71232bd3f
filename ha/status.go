package ha

import "time"

// Status is what a replica says of itself at /healthz.
type Status struct {
	Replica string `json:"replica"`
	// Backend is where the group lives: "etcd" or "kubernetes" (then the
	// Etcd fields speak of the API server).
	Backend string `json:"backend"`
	// Leader: this replica leads; LeaderName is the leader etcd named at
	// the last check ("" when none, or unknown).
	Leader     bool   `json:"leader"`
	LeaderName string `json:"leader_name,omitempty"`
	// EtcdReachable: etcd answered the last check. FailStatic: it did
	// not, and the replica serves the last version it installed.
	EtcdReachable bool      `json:"etcd_reachable"`
	FailStatic    bool      `json:"fail_static"`
	EtcdError     string    `json:"etcd_error,omitempty"`
	LastContact   time.Time `json:"last_contact,omitzero"`
	// Installed is the version served and when its leader published it
	// (zero for a version this replica computed alone at start);
	// Published the newest version seen in etcd. They differ while a
	// version is being installed, or when one was refused.
	Installed          string    `json:"installed_version"`
	InstalledPublished time.Time `json:"installed_published,omitzero"`
	Published          string    `json:"published_version,omitempty"`
	PublishedBy        string    `json:"published_by,omitempty"` // the replica that published it
	// Replicas is how many replicas' demand shares are live in etcd.
	Replicas int `json:"replicas"`
	// ConfigMismatch: the published version's leader has another
	// configuration.
	ConfigMismatch bool `json:"config_mismatch,omitempty"`
}

// Status returns the replica's view of the HA group now.
func (r *Replica) Status() Status {
	s := Status{Replica: r.name, Backend: r.b.kind(), Leader: r.Leading(), Replicas: r.shareCount()}
	if l := r.leader.Load(); l != nil {
		s.LeaderName = *l
	}
	if h := r.health.Load(); h != nil {
		s.EtcdReachable, s.FailStatic, s.EtcdError, s.LastContact = h.ok, !h.ok, h.err, h.contact
	} else {
		s.FailStatic = true
	}
	if in := r.installed.Load(); in != nil {
		s.Installed, s.InstalledPublished = in.w.Version(), in.rec.Published
	}
	if rec := r.seen.Load(); rec != nil {
		s.Published, s.PublishedBy = rec.Version, rec.Leader
		s.ConfigMismatch = rec.Config != r.cfgHash
	}
	return s
}
