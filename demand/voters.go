package demand

import (
	"sync"
	"time"
)

// maxVoters bounds the reporters' coverages the LRS server keeps; past
// it, the one used longest ago is forgotten.
const maxVoters = 4096

// voterCoverage keeps one coverage per voter (ServerOptions.Voter: a
// peer's verified identity and IP address), shared by all its LRS
// streams: however many streams a peer opens, and however often it
// opens new ones, its reports are believed to cover at most the time that
// passed (plus one interval of slack), so extproc.max_report_rate bounds
// its demand, not the rate times its streams. A voter's coverage is kept
// while it has streams and for the coverage horizon after (it would have
// refilled by then anyway). Safe for concurrent use.
type voterCoverage struct {
	mu       sync.Mutex
	interval time.Duration
	voters   map[string]*voterState
}

type voterState struct {
	cov     *coverage
	streams int
	used    time.Time
}

func newVoterCoverage(interval time.Duration) *voterCoverage {
	return &voterCoverage{interval: interval, voters: map[string]*voterState{}}
}

// open counts a stream of voter.
func (v *voterCoverage) open(voter string, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	st := v.voters[voter]
	if st == nil {
		v.trim(now)
		st = &voterState{cov: newCoverage(now, v.interval)}
		v.voters[voter] = st
	}
	st.streams++
	st.used = now
}

// closed ends a stream of voter counted by open.
func (v *voterCoverage) closed(voter string, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if st := v.voters[voter]; st != nil {
		st.streams--
		st.used = now
	}
}

// take is coverage.take on voter's shared coverage.
func (v *voterCoverage) take(voter string, now time.Time, claim time.Duration) time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	st := v.voters[voter]
	if st == nil { // opened before: cannot happen; believe nothing
		return 0
	}
	st.used = now
	return st.cov.take(now, claim)
}

// trim forgets voters without streams idle past the coverage horizon,
// then, at maxVoters, the one used longest ago without streams. Called
// under mu.
func (v *voterCoverage) trim(now time.Time) {
	horizon := coverageIntervals * v.interval
	for k, st := range v.voters {
		if st.streams <= 0 && now.Sub(st.used) > horizon {
			delete(v.voters, k)
		}
	}
	for len(v.voters) >= maxVoters {
		oldest := ""
		for k, st := range v.voters {
			if st.streams <= 0 && (oldest == "" || st.used.Before(v.voters[oldest].used)) {
				oldest = k
			}
		}
		if oldest == "" {
			return // every voter has a stream: bounded by the server's streams
		}
		delete(v.voters, oldest)
	}
}
