package benchkit

import (
	"math"
	"slices"
	"time"
)

// Summary is the distribution of one row's samples.
type Summary struct {
	// N is the number of samples.
	N int
	// P50 and P99 are nearest-rank percentiles: the smallest sample that is
	// at least as large as 50 % (99 %) of the samples. With fewer than 100
	// samples P99 is the maximum.
	P50, P99 time.Duration
	// Min and Max are the extremes.
	Min, Max time.Duration
}

// Summarize returns the distribution of samples; the zero Summary when
// there are none. samples is not modified.
func Summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	return Summary{
		N:   len(s),
		P50: percentile(s, 50),
		P99: percentile(s, 99),
		Min: s[0],
		Max: s[len(s)-1],
	}
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted, which must not be empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}
