#include "textflag.h"

// Go's assembler has no vector FMUL, FCVTNS, SQXTN, SSHLL or SCVTF: those are encoded here
// by hand, each with the instruction it is in a comment.

// func quantize16NEON(dst []int16, src []float32)
// len(src) is a multiple of 8. Scale by 32768, convert to the nearest int32 (halves to even;
// NaN gives 0, and beyond the range saturates), narrow to 16 bits with saturation: the
// clipping to [-1, 1] comes from the saturations.
TEXT ·quantize16NEON(SB), NOSPLIT, $0-48
	MOVD dst_base+0(FP), R0
	MOVD src_base+24(FP), R1
	MOVD src_len+32(FP), R2
	MOVW $0x47000000, R3 // 32768.0
	VDUP R3, V2.S4

loop:
	CBZ    R2, done
	VLD1.P 32(R1), [V0.S4, V1.S4]
	WORD   $0x6E22DC00 // FMUL   V0.4S, V0.4S, V2.4S
	WORD   $0x6E22DC21 // FMUL   V1.4S, V1.4S, V2.4S
	WORD   $0x4E21A800 // FCVTNS V0.4S, V0.4S
	WORD   $0x4E21A821 // FCVTNS V1.4S, V1.4S
	WORD   $0x0E614803 // SQXTN  V3.4H, V0.4S
	WORD   $0x4E614823 // SQXTN2 V3.8H, V1.4S
	VST1.P [V3.H8], 16(R0)
	SUB    $8, R2, R2
	B      loop

done:
	RET

// func dequantize16NEON(dst []float32, src []int16)
// len(src) is a multiple of 8: widen to 32 bits, convert, scale by 2^-15 (exact).
TEXT ·dequantize16NEON(SB), NOSPLIT, $0-48
	MOVD dst_base+0(FP), R0
	MOVD src_base+24(FP), R1
	MOVD src_len+32(FP), R2
	MOVW $0x38000000, R3 // 2^-15
	VDUP R3, V3.S4

loop:
	CBZ    R2, done
	VLD1.P 16(R1), [V0.H8]
	WORD   $0x0F10A401 // SSHLL  V1.4S, V0.4H, #0
	WORD   $0x4F10A402 // SSHLL2 V2.4S, V0.8H, #0
	WORD   $0x4E21D821 // SCVTF  V1.4S, V1.4S
	WORD   $0x4E21D842 // SCVTF  V2.4S, V2.4S
	WORD   $0x6E23DC21 // FMUL   V1.4S, V1.4S, V3.4S
	WORD   $0x6E23DC42 // FMUL   V2.4S, V2.4S, V3.4S
	VST1.P [V1.S4, V2.S4], 32(R0)
	SUB    $8, R2, R2
	B      loop

done:
	RET
