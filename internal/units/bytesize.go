// Package units reads and writes the units configuration values are
// written in, for config and the modules that own their keys.
//
// It imports the standard library only.
package units

import (
	"fmt"
	"strconv"
	"strings"
)

// ByteSize is a size in bytes that reads from text such as "100MiB", "64KiB",
// "1GB" or "512". Binary units (KiB, MiB, GiB) are powers of 1024, decimal
// ones (KB, MB, GB) powers of 1000.
type ByteSize uint64

var byteUnits = []struct {
	suffix string
	mult   uint64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000},
	{"B", 1},
}

// UnmarshalText parses a size with an optional unit.
func (b *ByteSize) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	mult := uint64(1)
	for _, u := range byteUnits {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || (mult > 1 && n > (1<<63)/mult) {
		return fmt.Errorf("invalid size %q: want a whole number with an optional unit B, KiB, MiB, GiB, KB, MB or GB", string(text))
	}
	*b = ByteSize(n * mult)
	return nil
}

// MarshalText writes the size in the largest binary unit that divides it.
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// String writes the size in the largest binary unit that divides it.
func (b ByteSize) String() string {
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && uint64(b)%u.mult == 0 {
			return strconv.FormatUint(uint64(b)/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatUint(uint64(b), 10) + "B"
}
