# cmake -DIN=file -DOUT=file.inc -P embed_text.cmake: writes IN as a C++ raw string literal, for
# `constexpr char x[] =\n#include "file.inc"\n;` (the web page compiled into the binary).
file(READ "${IN}" text)
string(FIND "${text}" ")NPULLM_EMBED\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )NPULLM_EMBED\"")
endif()
file(WRITE "${OUT}.tmp" "R\"NPULLM_EMBED(${text})NPULLM_EMBED\"\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
