// Package ha makes `ilb serve` one of several replicas of one ILB that
// share a backend (the ha: section of the configuration;
// docs/operations.md "High availability"): an etcd cluster, or with
// ha.kubernetes a Kubernetes API server (kube*.go; described at the end).
// What does not depend on the backend (installing, the controller's
// term, the demand sum, the store's rules, status, metrics) is the
// Replica's; the rest is behind the backend interface (backend.go).
//
// With etcd (etcd*.go), a [Replica] holds a session (an etcd lease of
// ha.lease_ttl, renewed in the background) and, through it:
//
//   - campaigns in an etcd election (the client's concurrency package).
//     The leader runs Options.Lead (the controller) until its term ends:
//     its session is lost (session.Done, at once), its election key is
//     deleted, or Lead returns. Only the leader publishes: every write of
//     a publication is an etcd transaction that compares the create
//     revision of the leader's election key, so a deposed leader's writes
//     are refused by etcd itself (fencing), whatever the deposed process
//     still believes.
//   - installs, on every replica (the leader too), the published version
//     into the local sinks (the xDS server, ext_proc, the weights metrics)
//     with the two phases of the controller (all prepare, then all
//     commit): every replica serves the same versions. A version is the
//     weights' content hash; its content is written once, under its own
//     key, and never rewritten: no version names two contents, and a
//     reader refuses a content whose hash is not its key.
//   - shares the demand this replica measured (its ext_proc meter and the
//     LRS reports of the Envoys connected to it) under a key attached to
//     its lease, every controller tick; the leader plans with the sum of
//     every live replica's share. A replica that dies stops counting when
//     its lease expires.
//   - keeps the weights history (the last published versions, with when
//     and by which leader) in etcd, so it survives restarting every
//     replica, and offers a small key/value [Store] for state other
//     packages keep across restarts (the xDS server's banned versions and
//     rollout state).
//
// Fail static: when etcd cannot be reached (no quorum, partition) every
// replica keeps serving the version it installed last, says so
// (ilb_ha_etcd_reachable, Status, a WARN line), and resumes installing
// published versions when etcd answers again; the leader's term ends when
// its lease can no longer be renewed.
//
// Keys, under ha.key_prefix P:
//
//	P election/<lease>        the election (concurrency.Election)
//	P current                 the record of the version in force (JSON)
//	P history/<seq>           the records of the last published versions
//	P versions/<v>/meta       the content of version v: chunk count, size, SHA-256
//	P versions/<v>/c/<i>      chunk i of its gzip'd JSON weights document
//	P demand/<replica>        a replica's demand share (on its lease)
//	P state/<ns>/<key>        Store
//
// With Kubernetes (kube*.go), the same roles are played by API objects
// in ha.kubernetes.namespace, named after the Lease L:
//
//   - the election is on Lease L, held as "<replica>_<instance>": the
//     holder renews it every quarter of its duration (every write of its
//     term renews it); a candidate watches it and takes it (an update
//     conditioned on the resourceVersion it read, raising its
//     transitions count: the term) once it saw no change for the lease
//     duration. A timer ends a leader's term two thirds of the duration
//     after its last successful write; a later term, or the Lease
//     replaced or deleted, ends it at once. On the way out it releases
//     its own hold (no holder).
//   - fencing: the record of the version in force and the history are
//     annotations of the Lease, and every publication is an update of
//     the Lease based on the leader's own last write: the API server
//     refuses it once anyone else wrote the Lease (a conflict), so a
//     deposed leader's publication never lands.
//   - content: ConfigMaps L-v-<version>-<c>-<i>, immutable, c the hash of
//     that encoding's bytes (a version's encodings differ), named by the
//     record and checked by every reader; one no record names is never
//     installed and is collected.
//   - demand: each replica rewrites ConfigMap L-demand-<replica> every
//     tick (with the time of the write, so each write changes it); a
//     share counts from a change seen by watch, for the lease duration
//     (or three ticks) after it, as an etcd lease would expire.
//   - store: ConfigMap L-store-<hash of the namespace>, updated with
//     resourceVersion preconditions; PutIfLeader writes only within a
//     third of the lease of the term's last write (no other replica can
//     have taken it), a check not atomic with the write (unlike etcd's).
package ha
