// repkv.h: what repkv_forward.cu and repkv_backward.cu share: the shape, its flags and checks, and the meta
// file that --dump writes and --load reads back.
#pragma once

#include "common.h"

struct RepkvShape { int B = 8, T = 1024, NH = 32, NKV = 8, HD = 128; };

inline void repkv_add_flags(Cli& cli, RepkvShape& s) {
    cli.add_int("B", &s.B, "batch size");
    cli.add_int("T", &s.T, "sequence length");
    cli.add_int("NH", &s.NH, "query heads");
    cli.add_int("NKV", &s.NKV, "key/value heads");
    cli.add_int("HD", &s.HD, "head dimension");
}

// exits 2 on a shape the versions cannot index: every size >= 1, NH a multiple of NKV, a row of the replicated
// tensor (`row`: out or dout, 3*NH*HD elements) in int
inline void repkv_check_shape(const RepkvShape& s, const char* row) {
    require(s.B >= 1 && s.T >= 1 && s.NH >= 1 && s.NKV >= 1 && s.HD >= 1, "B, T, NH, NKV, HD must be >= 1 (got %d, %d, %d, %d, %d)",
            s.B, s.T, s.NH, s.NKV, s.HD);
    require(s.NH % s.NKV == 0, "NH (%d) must be a multiple of NKV (%d)", s.NH, s.NKV);
    const int64_t c_out = mul64(mul64(3, s.NH, "3*NH"), s.HD, "3*NH*HD");
    require(c_out <= INT32_MAX, "a row of %s, 3*NH*HD = %lld elements, must be < 2^31 (32-bit column index)", row, (long long)c_out);
    mul64(mul64(s.B, s.T, "B*T"), c_out, "B*T*3*NH*HD");
}

// --load: <op>_meta.npy holds (B, T, NH, NKV, HD); the shape it gives is checked like the flags'
inline RepkvShape repkv_read_meta(const std::string& dir, const std::string& op, const char* row) {
    std::vector<int64_t> m = read_meta(dir, op + "_meta", 5, 1, INT32_MAX, "B, T, NH, NKV, HD");
    RepkvShape s = {(int)m[0], (int)m[1], (int)m[2], (int)m[3], (int)m[4]};
    repkv_check_shape(s, row);
    return s;
}

inline void repkv_write_meta(const std::string& dir, const std::string& op, const RepkvShape& s) {
    const int64_t meta[5] = {s.B, s.T, s.NH, s.NKV, s.HD};
    write_npy(dir, op + "_meta", meta, {5});
}
