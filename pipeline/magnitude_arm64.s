#include "textflag.h"

// func magnitudeBitsNEON(x []float32, lanes *[8]uint32)
// len(x) is a multiple of 16. The first four lanes of lanes get the largest of their samples'
// bits shifted left by one (the sign dropped: non-negative floats order as their bits do),
// from four accumulators of four lanes each; Go folds the lanes and shifts back.
TEXT ·magnitudeBitsNEON(SB), NOSPLIT, $0-32
	MOVD x_base+0(FP), R0
	MOVD x_len+8(FP), R2
	MOVD lanes+24(FP), R1
	VEOR V0.B16, V0.B16, V0.B16
	VEOR V1.B16, V1.B16, V1.B16
	VEOR V2.B16, V2.B16, V2.B16
	VEOR V3.B16, V3.B16, V3.B16

loop:
	CBZ    R2, fold
	VLD1.P 64(R0), [V4.S4, V5.S4, V6.S4, V7.S4]
	VSHL   $1, V4.S4, V4.S4
	VSHL   $1, V5.S4, V5.S4
	VSHL   $1, V6.S4, V6.S4
	VSHL   $1, V7.S4, V7.S4
	VUMAX  V4.S4, V0.S4, V0.S4
	VUMAX  V5.S4, V1.S4, V1.S4
	VUMAX  V6.S4, V2.S4, V2.S4
	VUMAX  V7.S4, V3.S4, V3.S4
	SUB    $16, R2, R2
	B      loop

fold:
	VUMAX V1.S4, V0.S4, V0.S4
	VUMAX V3.S4, V2.S4, V2.S4
	VUMAX V2.S4, V0.S4, V0.S4
	VST1  [V0.S4], (R1)
	RET
