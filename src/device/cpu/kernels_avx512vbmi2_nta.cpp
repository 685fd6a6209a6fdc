// The AVX-512 VBMI2 path (kernels_avx512vbmi2.cpp) built once more for AMD CPUs (Zen 4 and later),
// whose decode fetches its weights non-temporally (NPULLM_DECODE_FETCH_NTA; kernels_int8.h,
// PackedPanel, says why and what was measured): on Zen 5 that read TinyLlama Q4_0 at 87 % of the
// roofline against 78.5 % fetching into L2, while on a Sapphire Rapids-class Xeon it halved the
// stream. The same integers and bits as every other build; only where the fetched lines go differs.
// kernels.cpp picks it by the CPU's vendor.
#define NPULLM_AVX512_EXPORT avx512_vbmi2_nta_kernels
#define NPULLM_DECODE_FETCH_NTA
#include "device/cpu/kernels_avx512.cpp"
