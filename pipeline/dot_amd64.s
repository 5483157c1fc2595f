#include "textflag.h"

// func dotAVX2(h, x []float32) float32
// len(h) is a multiple of 16, len(x) ≥ len(h). Four accumulators of eight lanes each take 32
// taps a round (16 in the last round when len(h) is an odd multiple of 16); they are summed
// in a fixed order at the end.
TEXT ·dotAVX2(SB), NOSPLIT, $0-52
	MOVQ h_base+0(FP), SI
	MOVQ h_len+8(FP), CX
	MOVQ x_base+24(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

loop32:
	CMPQ CX, $32
	JLT  tail16
	VMOVUPS     (SI), Y4
	VMOVUPS     32(SI), Y5
	VMOVUPS     64(SI), Y6
	VMOVUPS     96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ        $128, SI
	ADDQ        $128, DI
	SUBQ        $32, CX
	JMP         loop32

tail16:
	CMPQ CX, $16
	JLT  sum
	VMOVUPS     (SI), Y4
	VMOVUPS     32(SI), Y5
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1

sum:
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	VZEROUPPER
	MOVSS        X0, ret+48(FP)
	RET
