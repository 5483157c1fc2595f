package yamlconf

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// MaxFileBytes bounds a configuration file: the commented example with every key is about
// 20 KB, so a file fifty times that is a mistake (or an attack), never a configuration.
const MaxFileBytes = 1 << 20

// ReadFile reads the regular file at path, of at most limit bytes. Anything else is refused at
// once, without reading a byte: a FIFO (whose open would wait for a writer), a device such as
// /dev/zero (endless), a folder, a socket, and a file over the limit.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, info, err := OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if info.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes; at most %v is read", path, info.Size(), Size(limit))
	}
	// The size can lie (a file still growing, /proc): never read more than the limit.
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s holds more than %v; at most that is read", path, Size(limit))
	}
	return b, nil
}

// OpenRegular opens path for reading if it is a regular file, and refuses anything else at
// once (see ReadFile).
func OpenRegular(path string) (*os.File, fs.FileInfo, error) {
	// O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. It changes
	// nothing for a regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !info.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s is %s, not a regular file", path, fileKind(info.Mode()))
	}
	return f, info, nil
}

func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a folder"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	default:
		return "of type " + m.Type().String()
	}
}
