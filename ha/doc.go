// Package ha makes `ilb serve` one of several replicas of one ILB that
// share an etcd cluster (the ha: section of the configuration; DESIGN §7,
// docs/operations.md "High availability").
//
// A [Replica] holds a session (an etcd lease of ha.lease_ttl, renewed in
// the background) and, through it:
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
package ha
