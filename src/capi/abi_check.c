/* The shared library's one source of its own: the C header must compile as C11, and the ABI number
 * it declares must be the SOVERSION CMake gives libnpullm.so (NPULLM_SOVERSION, set by the build). */
#include <npullm/npullm.h>

_Static_assert(NPULLM_ABI_VERSION == NPULLM_SOVERSION, "NPULLM_ABI_VERSION in npullm.h and the library's SOVERSION differ");
