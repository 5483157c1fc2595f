// Package lines reads the lines a child program writes (its log, its first words) for the
// program that started it.
package lines

import (
	"bufio"
	"io"
	"strings"
)

// MaxLine is the longest line handed on whole; a longer one comes in pieces of this size.
const MaxLine = 4096

// Each calls each with every line r gives until r ends or fails: without its line ending,
// invalid UTF-8 replaced by "?", cut at MaxLine bytes.
func Each(r io.Reader, each func(string)) {
	br := bufio.NewReaderSize(r, MaxLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			each(strings.TrimRight(strings.ToValidUTF8(string(line), "?"), "\r\n"))
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return
		}
	}
}
