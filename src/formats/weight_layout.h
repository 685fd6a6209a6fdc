// Weight layouts: how the N x K weight of a matmul sits in memory.
//
//   Rows      as GGUF stores it: N rows of ggml_row_bytes(type, K) bytes, one after another.
//   Panels16  the rows in panels of 16 (rows 16p .. 16p + 15; the last panel repeats row N - 1 to
//             fill its 16), each row padded with zero bytes to S = row_bytes rounded up to a
//             multiple of 4 (its "stride"), each panel dword-interleaved: dword d of row 16p + r
//             (bytes 4d .. 4d + 3 of the padded row) at byte 64 d + 4 r of the panel. A panel is
//             16 S bytes, so panel p starts at 16 p S. 64 zero bytes follow the last panel.
//
// Panels16 is the layout the CPU's int8 matmul reads 16 rows from at once, one row per vector lane:
// with Rows each 64-byte vector of 16 rows' dwords is a 16-row transpose; with Panels16 it is one
// load, and the panel streams from memory as one linear run instead of 16 interleaved ones. The
// bytes are the GGUF bytes moved, never changed, so every block layout still holds inside a row
// (padding only rounds rows of an odd number of 2-byte-aligned blocks, e.g. 19 Q6_K super-blocks of
// 210 bytes, to whole dwords). The 64 trailing bytes let a reader load the dword after a row's last
// one (a field that starts 2 bytes into a dword spans two).
#pragma once
#include <cstddef>
#include <cstdint>

#include "formats/ggml_types.h"

namespace npullm {

enum class WeightLayout : uint32_t { Rows = 0, Panels16 = 16 };

const char* weight_layout_name(WeightLayout l);  // "rows", "panels16"

// Whether an N x K weight of type t can be stored as Panels16 (a known type, whole blocks).
bool panels16_possible(GgmlType t, int64_t K);
// Bytes from one row to the next inside a Panels16 panel's lanes: row bytes rounded up to 4.
size_t panels16_stride(GgmlType t, int64_t K);
// Bytes of an N x K weight of type t in layout l.
size_t weight_bytes(GgmlType t, int64_t N, int64_t K, WeightLayout l);
// Copies row n of a Panels16 weight (N x K of type t) back into its GGUF form: ggml_row_bytes(t, K)
// bytes at dst (an embedding lookup in a table that is also a MatMul's weight).
void unpack_panels16_row(GgmlType t, const void* packed, int64_t K, int64_t n, void* dst);
// Writes panels [p0, p1) of the Panels16 form of the Rows weight `src` (N x K of type t) into dst
// (weight_bytes(t, N, K, Panels16) bytes; the trailing 64 bytes are written with the last panel).
void pack_panels16(GgmlType t, const void* src, int64_t N, int64_t K, void* dst, int64_t p0, int64_t p1);

}  // namespace npullm
