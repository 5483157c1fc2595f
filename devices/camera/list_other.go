//go:build !linux

package camera

import (
	"errors"
	"runtime"
)

func listDevices(string) ([]Info, error) {
	return nil, errors.New("list cameras: not supported on " + runtime.GOOS)
}
