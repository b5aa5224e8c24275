package subhub_test

import (
	"testing"

	"github.com/herdkit/herd/internal/subhub"
)

// TestSlot checks Slot against CLUSTER KEYSLOT's answers from the Redis
// Cluster specification, and the hash tag rules.
func TestSlot(t *testing.T) {
	for _, tc := range []struct {
		name string
		want int
	}{
		{"somekey", 11058},
		{"foo{hash_tag}", 2515},
		{"123456789", 0x31C3}, // the CRC16-XMODEM check value
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"user1000", 3443},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := subhub.Slot(tc.name); got != tc.want {
				t.Errorf("Slot(%q) = %d, want %d", tc.name, got, tc.want)
			}
		})
	}
	if subhub.Slot("foo{}{bar}") == subhub.Slot("bar") {
		t.Error(`"foo{}{bar}" hashed as its second tag; an empty first tag means the whole name`)
	}
}
