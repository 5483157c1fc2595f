#include "textflag.h"

// func magnitudeBitsAVX2(x []float32, lanes *[8]uint32)
// len(x) is a multiple of 32. Each lane of lanes gets the largest of its samples' bits shifted
// left by one (the sign dropped: non-negative floats order as their bits do), from four
// accumulators of eight lanes each; Go folds the lanes and shifts back.
TEXT ·magnitudeBitsAVX2(SB), NOSPLIT, $0-32
	MOVQ  x_base+0(FP), SI
	MOVQ  x_len+8(FP), CX
	MOVQ  lanes+24(FP), DI
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3

loop:
	CMPQ    CX, $32
	JLT     fold
	VMOVDQU (SI), Y4
	VMOVDQU 32(SI), Y5
	VMOVDQU 64(SI), Y6
	VMOVDQU 96(SI), Y7
	VPSLLD  $1, Y4, Y4
	VPSLLD  $1, Y5, Y5
	VPSLLD  $1, Y6, Y6
	VPSLLD  $1, Y7, Y7
	VPMAXUD Y4, Y0, Y0
	VPMAXUD Y5, Y1, Y1
	VPMAXUD Y6, Y2, Y2
	VPMAXUD Y7, Y3, Y3
	ADDQ    $128, SI
	SUBQ    $32, CX
	JMP     loop

fold:
	VPMAXUD Y1, Y0, Y0
	VPMAXUD Y3, Y2, Y2
	VPMAXUD Y2, Y0, Y0
	VMOVDQU Y0, (DI)
	VZEROUPPER
	RET
