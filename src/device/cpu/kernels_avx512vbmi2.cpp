// The AVX-512 path built once more, with AVX-512 VBMI2 and BITALG as well (Ice Lake, Sapphire
// Rapids, Zen 4 and later; not Skylake-SP, Cascade Lake or Cooper Lake, which run
// kernels_avx512.cpp's build). The differences: Avx512IO::mid16, the dword that straddles two (a
// field of the block types whose blocks are 2-byte aligned: Q4_0, Q5_0, Q8_0, Q6_K), is one
// vpshrdd instead of two shifts and an or; Avx512IO::or_hbit4, the fifth bit of Q5_0 / Q5_1, is a
// bit gather to a byte mask and a masked add instead of a shift, a permute and an or. The integers
// are the same, so are the bits. With the weights in L2, one thread (npullm_bench_kernels
// DecodeWarm, 2048 x 256, Zen 5): VBMI2 Q8_0 75-76 -> 82 GB/s, Q5_0 56 -> 59, Q6_K 48-49 -> 51,
// Q4_0 54-55 -> 56, Q4_K unchanged (its 144-byte blocks are dword-aligned); BITALG Q5_0
// 58.5-60.3 -> 63.0-63.7, Q5_1 59-64 -> 66-67.
// kernels.cpp picks this build for the "avx512" path where the CPU has both.
#define NPULLM_AVX512_EXPORT avx512_vbmi2_kernels
#include "device/cpu/kernels_avx512.cpp"
