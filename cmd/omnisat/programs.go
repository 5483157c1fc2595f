package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// helperProgram is one of omnisat's own programs that it runs as a child: the camera program,
// which alone links OpenCV, and the model server simulator, which a satellite never needs.
// Keeping them out of omnisat's binary keeps what a satellite maps small.
type helperProgram struct {
	name     string // the file's name
	env      string // the environment variable that names it instead
	what     string // how errors call it
	neededBy string // what asked for it, for the error when it is missing
}

// findProgram finds a helper program: $ENV, else next to this binary (a build tree: bin/omnisat
// and bin/NAME), else ../libexec/omnisat/ from it (the package: /usr/bin/omnisat and
// /usr/libexec/omnisat/NAME, FHS 3.0's place for a program that other programs run).
func findProgram(p helperProgram) (string, error) {
	if path := os.Getenv(p.env); path != "" {
		if fi, err := os.Stat(path); err != nil || fi.IsDir() {
			return "", fmt.Errorf("%s %s=%s is not there", p.what, p.env, path)
		}
		return path, nil
	}
	exe, err := os.Executable()
	if err != nil {
		// No /proc (a chroot, an early boot): the path omnisat was started by.
		if path, lerr := exec.LookPath(os.Args[0]); lerr == nil {
			exe, err = filepath.Abs(path)
		}
	}
	if err != nil {
		return "", fmt.Errorf("find %s: %w", p.what, err)
	}
	return programBeside(p, exe)
}

// programBeside finds a helper program where it is installed relative to exe.
func programBeside(p helperProgram, exe string) (string, error) {
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	dir := filepath.Dir(exe)
	tried := []string{filepath.Join(dir, p.name), filepath.Join(dir, "..", "libexec", "omnisat", p.name)}
	for _, path := range tried {
		if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
			return filepath.Clean(path), nil
		}
	}
	return "", fmt.Errorf("%s, but %s %s is not installed (looked for %s)", p.neededBy, p.what, p.name, strings.Join(tried, ", "))
}
