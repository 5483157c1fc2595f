package lines

import (
	"slices"
	"strings"
	"testing"
)

// Lines come without their endings, cleaned, long ones in pieces, and a last line without a
// newline still comes.
func TestEach(t *testing.T) {
	long := strings.Repeat("x", MaxLine+10)
	in := "one\r\ntwo\n\xffbad\n" + long + "\nlast"
	var got []string
	Each(strings.NewReader(in), func(s string) { got = append(got, s) })
	want := []string{"one", "two", "?bad", long[:MaxLine], long[MaxLine:], "last"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}
