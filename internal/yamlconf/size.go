package yamlconf

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Size is a number of bytes written as 5MB, 512KiB, 1GB or a plain number. KB, MB and GB are
// powers of 1000 and KiB, MiB and GiB powers of 1024, as in the SI and IEC standards; a bare K,
// M or G is binary, as in systemd and ls -h. The unit is case-insensitive and may follow a space.
type Size int64

var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9,
	"k": 1 << 10, "m": 1 << 20, "g": 1 << 30,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
}

// ParseSize reads a size such as "5MB" or "4 MiB".
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(t)
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := sizeUnits[unit]
	v, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || v < 0 || math.IsInf(v*mult, 0) || v*mult > math.MaxInt64/2 {
		return 0, fmt.Errorf("%q is not %s", s, Size(0).Want())
	}
	return Size(math.Round(v * mult)), nil
}

// Want says what a size looks like, for error messages.
func (Size) Want() string { return "a size (such as 512KB, 5MB, 4MiB or a number of bytes)" }

// UnmarshalYAML reads a size from a YAML scalar.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("not %s", s.Want())
	}
	v, err := ParseSize(n.Value)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalYAML writes the size in the largest binary unit that divides it.
func (s Size) MarshalYAML() (any, error) { return s.String(), nil }

func (s Size) String() string {
	for _, u := range []struct {
		name string
		v    Size
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if s >= u.v && s%u.v == 0 {
			return fmt.Sprintf("%d%s", s/u.v, u.name)
		}
	}
	return strconv.FormatInt(int64(s), 10)
}
