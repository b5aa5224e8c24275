package subhub

import "strings"

// Slot returns the Redis Cluster hash slot of name: CRC16 (XMODEM) of its
// hash tag (the text between the first "{" and the next "}", when not empty)
// or of the whole name, modulo 16384.
func Slot(name string) int {
	if i := strings.IndexByte(name, '{'); i >= 0 {
		if j := strings.IndexByte(name[i+1:], '}'); j > 0 {
			name = name[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(name); k++ {
		crc ^= uint16(name[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
