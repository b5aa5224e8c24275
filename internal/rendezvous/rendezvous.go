// Package rendezvous is the hash behind herd's rendezvous (highest random
// weight) choices: durable's default pick of a new inbox for a removed
// slave's messages, and assign's plan of items over slaves. Every process
// computes the same value on every platform, so choices agree without
// talking.
package rendezvous

import "math"

// Hash is FNV-1a (64 bit) of key, a zero byte and slave, finished with the
// splitmix64 mixer so that close inputs give unrelated outputs.
func Hash(key, slave string) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * prime
	}
	h *= prime // the zero byte
	for i := 0; i < len(slave); i++ {
		h = (h ^ uint64(slave[i])) * prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}

// Score is the weighted rendezvous score of slave for key: -weight / ln(u)
// with u uniform in (0, 1) drawn from Hash. The slave with the highest
// score wins; P(slave i wins) = weight_i / Σ weights.
func Score(key, slave string, weight float64) float64 {
	u := (float64(Hash(key, slave)>>11) + 0.5) / (1 << 53)
	return -weight / math.Log(u)
}
