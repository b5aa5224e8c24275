package subhub

import "strings"

// Slot returns the Redis Cluster hash slot of name: CRC16 (XMODEM) of its
// hash tag, or of the whole name when it has none, modulo 16384.
func Slot(name string) int {
	return int(crc16(hashTag(name))) % 16384
}

// hashTag returns the part of name that Redis Cluster hashes: the text
// between the first "{" and the next "}" when it is not empty, else the
// whole name.
func hashTag(name string) string {
	if _, after, ok := strings.Cut(name, "{"); ok {
		if tag, _, ok := strings.Cut(after, "}"); ok && tag != "" {
			return tag
		}
	}
	return name
}

// crc16 is the CRC16 (XMODEM: polynomial 0x1021, initial value 0) of s.
func crc16(s string) uint16 {
	var crc uint16
	for k := 0; k < len(s); k++ {
		crc ^= uint16(s[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
