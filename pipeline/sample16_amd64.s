#include "textflag.h"

DATA sample16consts<>+0(SB)/4, $-1.0
DATA sample16consts<>+4(SB)/4, $1.0
DATA sample16consts<>+8(SB)/4, $32768.0
DATA sample16consts<>+12(SB)/4, $0x38000000 // 2^-15
GLOBL sample16consts<>(SB), RODATA|NOPTR, $16

// func quantize16AVX2(dst []int16, src []float32)
// len(src) is a multiple of 16. Per eight lanes: NaN to 0 (a lane unordered with itself is
// masked off), clip to [-1, 1], scale by 32768, round to the nearest (halves to even: the
// default MXCSR mode), pack to 16 bits with saturation (32768 becomes 32767). The pack works
// within 128-bit halves; VPERMQ puts the four quarters back in order.
TEXT ·quantize16AVX2(SB), NOSPLIT, $0-48
	MOVQ         dst_base+0(FP), DI
	MOVQ         src_base+24(FP), SI
	MOVQ         src_len+32(FP), CX
	VBROADCASTSS sample16consts<>+0(SB), Y8
	VBROADCASTSS sample16consts<>+4(SB), Y9
	VBROADCASTSS sample16consts<>+8(SB), Y10

loop:
	CMPQ      CX, $16
	JLT       done
	VMOVUPS   (SI), Y0
	VMOVUPS   32(SI), Y1
	VCMPPS    $7, Y0, Y0, Y2
	VCMPPS    $7, Y1, Y1, Y3
	VANDPS    Y2, Y0, Y0
	VANDPS    Y3, Y1, Y1
	VMAXPS    Y8, Y0, Y0
	VMAXPS    Y8, Y1, Y1
	VMINPS    Y9, Y0, Y0
	VMINPS    Y9, Y1, Y1
	VMULPS    Y10, Y0, Y0
	VMULPS    Y10, Y1, Y1
	VCVTPS2DQ Y0, Y0
	VCVTPS2DQ Y1, Y1
	VPACKSSDW Y1, Y0, Y0
	VPERMQ    $0xD8, Y0, Y0
	VMOVDQU   Y0, (DI)
	ADDQ      $64, SI
	ADDQ      $32, DI
	SUBQ      $16, CX
	JMP       loop

done:
	VZEROUPPER
	RET

// func dequantize16AVX2(dst []float32, src []int16)
// len(src) is a multiple of 16: sign-extend eight samples at a time to 32 bits, convert,
// scale by 2^-15 (exact).
TEXT ·dequantize16AVX2(SB), NOSPLIT, $0-48
	MOVQ         dst_base+0(FP), DI
	MOVQ         src_base+24(FP), SI
	MOVQ         src_len+32(FP), CX
	VBROADCASTSS sample16consts<>+12(SB), Y8

loop:
	CMPQ      CX, $16
	JLT       done
	VPMOVSXWD (SI), Y0
	VPMOVSXWD 16(SI), Y1
	VCVTDQ2PS Y0, Y0
	VCVTDQ2PS Y1, Y1
	VMULPS    Y8, Y0, Y0
	VMULPS    Y8, Y1, Y1
	VMOVUPS   Y0, (DI)
	VMOVUPS   Y1, 32(DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JMP       loop

done:
	VZEROUPPER
	RET
