#include "textflag.h"

// func dotNEON(h, x []float32) float32
// len(h) is a multiple of 16, len(x) ≥ len(h). Four accumulators of four lanes each take 16
// taps a round; they are folded into one (a multiply-add by 1.0 is an exact add: Go's
// assembler has no vector FADD) and its lanes summed in a fixed order.
TEXT ·dotNEON(SB), NOSPLIT, $16-52
	MOVD h_base+0(FP), R0
	MOVD h_len+8(FP), R2
	MOVD x_base+24(FP), R1
	VEOR V0.B16, V0.B16, V0.B16
	VEOR V1.B16, V1.B16, V1.B16
	VEOR V2.B16, V2.B16, V2.B16
	VEOR V3.B16, V3.B16, V3.B16

loop:
	CBZ    R2, sum
	VLD1.P 64(R0), [V4.S4, V5.S4, V6.S4, V7.S4]
	VLD1.P 64(R1), [V16.S4, V17.S4, V18.S4, V19.S4]
	VFMLA  V4.S4, V16.S4, V0.S4
	VFMLA  V5.S4, V17.S4, V1.S4
	VFMLA  V6.S4, V18.S4, V2.S4
	VFMLA  V7.S4, V19.S4, V3.S4
	SUB    $16, R2, R2
	B      loop

sum:
	FMOVS $(1.0), F8
	VDUP  V8.S[0], V8.S4
	VFMLA V1.S4, V8.S4, V0.S4
	VFMLA V3.S4, V8.S4, V2.S4
	VFMLA V2.S4, V8.S4, V0.S4
	MOVD  RSP, R3
	ADD   $8, R3, R3
	VST1  [V0.S4], (R3)
	FMOVS (R3), F0
	FMOVS 4(R3), F1
	FMOVS 8(R3), F2
	FMOVS 12(R3), F3
	FADDS F1, F0, F0
	FADDS F3, F2, F2
	FADDS F2, F0, F0
	FMOVS F0, ret+48(FP)
	RET
