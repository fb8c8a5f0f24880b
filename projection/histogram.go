package projection

import (
	"math"
	"math/bits"
	"sort"
)

// Histogram is a bounded histogram of non-negative integers (durations in
// milliseconds here) with log-linear buckets: values below 8 have a bucket
// each, and every power of two above is split into 8 buckets, so a
// percentile is exact to within 12.5% whatever the range, in at most 488
// counters. It is deterministic (no sampling), so a fold from zero and a
// fold from a checkpoint agree exactly.
type Histogram struct {
	Counts map[int]int64 // bucket index -> count; only non-zero buckets
	Total  int64
	Sum    int64
	Min    int64
	Max    int64
}

const histSub = 8 // buckets per power of two

func bucketOf(v int64) int {
	if v < histSub {
		if v < 0 {
			return 0
		}
		return int(v)
	}
	e := bits.Len64(uint64(v)) - 1 // 2^e <= v < 2^(e+1), e >= 3
	sub := int(uint64(v)>>(e-3)) & (histSub - 1)
	return histSub + (e-3)*histSub + sub
}

// bucketUpper is the largest value that falls in bucket i.
func bucketUpper(i int) int64 {
	if i < histSub {
		return int64(i)
	}
	e := (i-histSub)/histSub + 3
	sub := (i - histSub) % histSub
	lower := uint64(histSub+sub) << (e - 3)
	upper := lower + (uint64(1) << (e - 3)) - 1
	if upper > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(upper)
}

// Add records one value; negative values count as 0.
func (h *Histogram) Add(v int64) {
	if v < 0 {
		v = 0
	}
	if h.Counts == nil {
		h.Counts = map[int]int64{}
	}
	h.Counts[bucketOf(v)]++
	if h.Total == 0 || v < h.Min {
		h.Min = v
	}
	if v > h.Max {
		h.Max = v
	}
	h.Total++
	h.Sum += v
}

// Quantile returns an upper bound of the q-quantile (0 < q <= 1): the upper
// edge of the bucket holding it, never more than the largest value seen.
// It returns 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) int64 {
	if h.Total == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.Total)))
	if rank < 1 {
		rank = 1
	}
	idx := make([]int, 0, len(h.Counts))
	for i := range h.Counts {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var seen int64
	for _, i := range idx {
		seen += h.Counts[i]
		if seen >= rank {
			return min(bucketUpper(i), h.Max)
		}
	}
	return h.Max
}

// Mean returns the average value, 0 when empty.
func (h *Histogram) Mean() float64 {
	if h.Total == 0 {
		return 0
	}
	return float64(h.Sum) / float64(h.Total)
}
