//go:build !linux

package quietout

func kindOf(uintptr) kind { return ordinary }

func quietWrite(kind, uintptr, []byte) int { return 0 }
