// Package test holds ILB's end-to-end tests: the whole stack (simulated
// engines, ILB, envoysim per source) on loopback, driven by real HTTP
// requests, checked through real interfaces (responses, the admin API,
// Prometheus text).
package test
