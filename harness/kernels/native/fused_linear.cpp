// Fused CPU kernels for the non-causal linear-attention inference path (harness/kernels/native/__init__.py).
//
// One call walks a range of rows of every (batch, head) in blocks of ROWS rows that stay in L1/L2: project the
// block (x W), turn it into features in registers (favor's exp(u - row max), elu + 1, sin/cos, the paper maps
// of enum Kind), and either
// accumulate phi^T (w v) and phi^T w (keys) or write phi S / phi s (queries). Register-tiled products written
// with GCC vector extensions, so the compiler emits AVX-512, AVX2 or NEON from the same source.
// Semantics mirror chunked_linear_attention exactly (see native/__init__.py); nothing here allocates per row.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>
#include <sched.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

typedef float v16 __attribute__((vector_size(64)));
typedef int32_t vi16 __attribute__((vector_size(64)));
typedef float v8 __attribute__((vector_size(32)));
typedef int32_t vi8 __attribute__((vector_size(32)));

namespace {

// rows per block: 32 (the block's features and values stay in L1/L2; 16-128 were measured, 32 was best for
// both 64 and 256 features); ATTNBENCH_NATIVE_ROWS overrides it for experiments
int block_rows() {
    static const int rows = [] {
        const char* e = std::getenv("ATTNBENCH_NATIVE_ROWS");
        int r = e ? std::atoi(e) / 8 * 8 : 32;
        return r < 8 ? 8 : r > 512 ? 512 : r;
    }();
    return rows;
}

constexpr float NEG_INF = -std::numeric_limits<float>::infinity();

// floats left uninitialised, for scratch that is written before it is read (std::vector zeroes them first: a
// megabyte a training step at 1024 tokens)
struct Scratch {
    std::unique_ptr<float[]> held;
    explicit Scratch(int64_t n) : held(new float[n > 0 ? n : 1]) {}
    float* data() const { return held.get(); }
    float& operator[](int64_t i) const { return held[i]; }
};

// the feature functions f(u), u = x w: favor's exp(u - row max); elu + 1; [sin, cos]; and the paper's maps
// (baselines/feature_maps.py, the "paper" form): softmaxfeat (exp(u - row max), as favor's values), elu + 1 of u + bias
// floored, softplus + floor, sigmoid^2, cos^2(u + phase). The paper's maps reweight each key by sqrt(M) / max(sum_m
// f, floor) (its l1 normaliser); a query's normaliser cancels in phi S / phi s, so queries keep f as it is
// ids generated from harness/kernels/native/__init__.py KIND_TABLE (compiler definition ATTNBENCH_KIND_ENUM)
enum Kind { ATTNBENCH_KIND_ENUM };

inline v16 load(const float* p) { v16 r; std::memcpy(&r, p, sizeof r); return r; }
inline v8 load8(const float* p) { v8 r; std::memcpy(&r, p, sizeof r); return r; }
inline void store(float* p, v16 x) { std::memcpy(p, &x, sizeof x); }

// the lane vector of the elementwise loops (feature maps and their slopes, maxima, exp, dropout): 16 floats with
// AVX-512, 8 without it, where GCC lowers a compare or blend of 64-byte vectors element by element through the
// stack (cos2's feature and gradient loops ran 20-30x slower on an AVX2 build). Each element sees the same
// operations either way, so both give the same bits; sums over lanes (hsum) keep 16 lanes for the same reason
#if defined(__AVX512F__)
typedef v16 vl;
typedef vi16 vil;
typedef uint32_t vul __attribute__((vector_size(64)));
#else
typedef v8 vl;
typedef vi8 vil;
typedef uint32_t vul __attribute__((vector_size(32)));
#endif
constexpr int LANES = sizeof(vl) / sizeof(float);
inline vl loadl(const float* p) { vl r; std::memcpy(&r, p, sizeof r); return r; }
inline void storel(float* p, vl x) { std::memcpy(p, &x, sizeof x); }
template <class V> inline V same(float a) { return V{} + a; }  // a in every lane of V
template <class V> struct IntsOf;
template <> struct IntsOf<v16> { typedef vi16 type; };
template <> struct IntsOf<v8> { typedef vi8 type; };

// tree reductions across lanes (a scalar loop would be 16 dependent additions: FP order is kept without -ffast-math):
// lane i with lane i ^ 8, then ^ 4, ^ 2, ^ 1. Without AVX-512 the first step adds the two 32-byte halves and the
// rest shuffle within one (a 64-byte shuffle went through the stack there), the same sums in the same order
inline v16 swap(v16 x, int w) {
    vi16 lanes = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    return __builtin_shuffle(x, lanes ^ w);
}
inline v8 swap(v8 x, int w) {
    vi8 lanes = {0, 1, 2, 3, 4, 5, 6, 7};
    return __builtin_shuffle(x, lanes ^ w);
}
inline void halves(v16 x, v8* lo, v8* hi) {
    std::memcpy(lo, &x, sizeof *lo);
    std::memcpy(hi, reinterpret_cast<const char*>(&x) + sizeof *lo, sizeof *hi);
}
inline float hsum(v16 x) {
#if defined(__AVX512F__)
    for (int w = 8; w >= 1; w /= 2) x += swap(x, w);
    return x[0];
#else
    v8 a, b;
    halves(x, &a, &b);
    a += b;
    for (int w = 4; w >= 1; w /= 2) a += swap(a, w);
    return a[0];
#endif
}
inline float hmax(v8 x) {
    for (int w = 4; w >= 1; w /= 2) { v8 y = swap(x, w); x = y > x ? y : x; }
    return x[0];
}
inline float hmax(v16 x) {
#if defined(__AVX512F__)
    for (int w = 8; w >= 1; w /= 2) { v16 y = swap(x, w); x = y > x ? y : x; }
    return x[0];
#else
    v8 a, b;
    halves(x, &a, &b);
    return hmax(b > a ? b : a);
#endif
}
// sum of squares of a row of d (a multiple of 16) floats
inline float squared_norm(const float* x, int d) {
    v16 acc = {};
    for (int i = 0; i < d; i += 16) { v16 a = load(x + i); acc += a * a; }
    return hsum(acc);
}

// exp(x): x = n ln2 + r with |r| <= ln2 / 2, exp(r) by a degree-6 polynomial (a near-minimax fit for relative error
// on that interval), times 2^n; relative error below 1e-7 on [-103, 88] (as Cephes' degree-7 form, 8e-8). With
// AVX-512, vrndscaleps and vscalefps (which underflows to 0 and overflows to inf by itself) take the rounding and
// the scaling: 12 vector operations instead of 18, 1.7x the rate in isolation, 4-6% of Performer's forward.
// Without it (and on 8 lanes) x is clamped to [-87.3, 88.3] so that 2^n stays normal: below -87.3 it gives
// exp(-87.3) = 1.2e-38 where the AVX-512 form goes subnormal
template <class V>
inline V exp_reduced(V x, V n) {
    V r = x - n * 0.693359375f + n * 2.12194440e-4f;  // ln 2 in two parts: n ln2 exact to float precision
    V p = same<V>(1.3840249739587307e-3f);
    p = p * r + 8.375746197998524e-3f;
    p = p * r + 4.166821762919426e-2f;
    p = p * r + 1.6666407883167267e-1f;
    p = p * r + 4.9999991059303284e-1f;
    p = p * r + 1.0f;
    return p * r + 1.0f;
}
template <class V>
inline V vexp(V x) {
    typedef typename IntsOf<V>::type VI;
    x = x < -87.3f ? same<V>(-87.3f) : x;  // 2^n built from its exponent bits below: n within the normal range
    x = x > 88.3f ? same<V>(88.3f) : x;
    V n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln 2)
    V p = exp_reduced(x, n);
    VI bits = (__builtin_convertvector(n, VI) + 127) << 23;
    V two_n;
    std::memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}
#if defined(__AVX512F__)
template <>
inline v16 vexp(v16 x) {
    v16 n = (v16)_mm512_roundscale_ps((__m512)(x * 1.44269504088896341f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return (v16)_mm512_scalef_ps((__m512)exp_reduced(x, n), (__m512)n);
}
#endif

// sin and cos of x together (|x| up to ~1e4 keeps full float accuracy): Cody-Waite reduction by pi/2, Cephes'
// polynomials on [-pi/4, pi/4], quadrant swap and signs
template <class V>
inline void vsincos(V x, V* s, V* c) {
    typedef typename IntsOf<V>::type VI;
    V j = (x * 0.636619772367581343f + 12582912.0f) - 12582912.0f;  // round(x / (pi/2))
    V r = ((x - j * 1.5703125f) - j * 4.837512969970703125e-4f) - j * 7.54978995489188216e-8f;
    V z = r * r;
    V ps = ((-1.9515295891e-4f * z + 8.3321608736e-3f) * z - 1.6666654611e-1f) * z * r + r;
    V pc = ((2.443315711809948e-5f * z - 1.388731625493765e-3f) * z + 4.166664568298827e-2f) * z * z;
    pc = pc - 0.5f * z + 1.0f;
    VI q = __builtin_convertvector(j, VI) & 3;
    V sin_v = (q & 1) != 0 ? pc : ps;
    V cos_v = (q & 1) != 0 ? ps : pc;
    sin_v = (q & 2) != 0 ? -sin_v : sin_v;
    cos_v = ((q + 1) & 2) != 0 ? -cos_v : cos_v;
    *s = sin_v;
    *c = cos_v;
}

// software prefetch of the next block's rows, spread over the tiles of the current block's products, so memory
// streams while the cores compute (the hardware prefetcher sees only the bursts of the feature loop)
struct Prefetch {
    const char* next[2] = {nullptr, nullptr};
    const char* end[2] = {nullptr, nullptr};
    int per_step[2] = {0, 0};
    // prefetch `floats` floats from `from` (range 0 or 1) over `steps` calls of step()
    void plan(const float* from, int64_t floats, int steps, int range = 0) {
        next[range] = reinterpret_cast<const char*>(from);
        end[range] = next[range] + floats * sizeof(float);
        int64_t lines = (floats * sizeof(float) + 63) / 64;
        per_step[range] = static_cast<int>((lines + steps - 1) / (steps > 0 ? steps : 1));
    }
    void step() {
        for (int r = 0; r < 2; ++r)
            for (int i = 0; i < per_step[r] && next[r] < end[r]; ++i, next[r] += 64) __builtin_prefetch(next[r], 0, 3);
    }
};

inline void stream(float* p, v16 x) {
#if defined(__AVX512F__)
    if ((reinterpret_cast<uintptr_t>(p) & 63) == 0) { __builtin_ia32_movntps512(p, x); return; }
#endif
    store(p, x);
}

// c (R x L C, row stride cs) = a @ b, plus c's values when `add`, on vectors V of L floats; a (R x k) read as
// a[r * ar + i * ak] (so a transposed operand costs nothing), b (k x L C, row stride bs). R and C are compile-time, so
// the R x C accumulators stay in vector registers
template <class V, int R, int C>
inline void tile_on(const float* a, int64_t ar, int64_t ak, int k, const float* b, int64_t bs, float* c, int64_t cs,
                    bool add) {
    constexpr int L = sizeof(V) / sizeof(float);
    V acc[R][C] = {};
    if (add)
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
            for (int j = 0; j < C; ++j) std::memcpy(&acc[r][j], c + r * cs + L * j, sizeof(V));
    for (int i = 0; i < k; ++i) {
        V bv[C];
#pragma GCC unroll 8
        for (int j = 0; j < C; ++j) std::memcpy(&bv[j], b + i * bs + L * j, sizeof(V));
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            float x = a[r * ar + i * ak];
#pragma GCC unroll 8
            for (int j = 0; j < C; ++j) acc[r][j] += x * bv[j];
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int j = 0; j < C; ++j) std::memcpy(c + r * cs + L * j, &acc[r][j], sizeof(V));
}

// the one register-tiled product: c (RT x 16 NC) = a @ b (+ c), as tile_on. With AVX-512 one tile of RT x NC
// 64-byte accumulators (4 x 4 of its 32 registers). Without it a 64-byte vector is two registers and GCC lowers a
// scalar times one through the stack (16 scalar stores and reloads a product: 10x slower than PyTorch's path on an
// AVX2 EPYC), so sub-tiles of 32-byte vectors that fit its 16 registers. Each element of c sums a[r, i] b[i, j]
// over i in order from the same start either way: the same bits
template <int RT, int NC>
inline void tile(const float* a, int64_t ar, int64_t ak, int k, const float* b, int64_t bs, float* c, int64_t cs,
                 bool add) {
#if defined(__AVX512F__)
    tile_on<v16, RT, NC>(a, ar, ak, k, b, bs, c, cs, add);
#else
    constexpr int R = RT < 4 ? RT : 4, W = 2 * NC, C_MAX = R >= 4 ? 2 : R >= 2 ? 4 : 8, C = W < C_MAX ? W : C_MAX;
    static_assert(RT % R == 0 && W % C == 0, "sub-tiles must cover the tile");
    for (int r = 0; r < RT; r += R)
        for (int j = 0; j < W; j += C)
            tile_on<v8, R, C>(a + r * ar, ar, ak, k, b + 8 * j, bs, c + r * cs + 8 * j, cs, add);
#endif
}

template <int RT>
void project_rows(const float* x, int64_t ar, int64_t ak, int d, const float* w, int m, float* u) {
    int c = 0;  // RT rows of x read as x[r * ar + i * ak] (ak = 1: by rows; ar = 1: down the columns of x^T)
    for (; c + 64 <= m; c += 64) tile<RT, 4>(x, ar, ak, d, w + c, m, u + c, m, false);
    for (; c < m; c += 16) tile<RT, 1>(x, ar, ak, d, w + c, m, u + c, m, false);
}

// u (rows x m) = x (rows x d) @ w (d x m)
void project(const float* x, int rows, int d, const float* w, int m, float* u) {
    int r = 0;
    for (; r + 4 <= rows; r += 4) project_rows<4>(x + r * d, d, 1, d, w, m, u + r * m);
    for (; r < rows; ++r) project_rows<1>(x + r * d, d, 1, d, w, m, u + r * m);
}

template <int NV>
constexpr int tile_rows() { return NV >= 8 ? 2 : NV >= 4 ? 4 : 8 / NV; }

// state (m x 16 NV) += phi^T (m x rows) @ vals (rows x 16 NV): phi read transposed, tile_rows feature rows a tile
template <int NV>
void accumulate(const float* phi, int m, int rows, const float* vals, float* state, Prefetch* pf) {
    constexpr int IT = tile_rows<NV>(), DV = 16 * NV;
    int i = 0;
    for (; i + IT <= m; i += IT, pf->step()) tile<IT, NV>(phi + i, 1, m, rows, vals, DV, state + i * DV, DV, true);
    for (; i < m; ++i) tile<1, NV>(phi + i, 1, m, rows, vals, DV, state + i * DV, DV, true);
}

// out (rows x 16 NV) = phi (rows x m) @ state (m x 16 NV)
template <int NV>
void apply(const float* phi, int m, int rows, const float* state, float* out, Prefetch* pf) {
    constexpr int RT = tile_rows<NV>(), DV = 16 * NV;
    int r = 0;
    for (; r + RT <= rows; r += RT, pf->step()) tile<RT, NV>(phi + r * m, m, 1, m, state, DV, out + r * DV, DV, false);
    for (; r < rows; ++r) tile<1, NV>(phi + r * m, m, 1, m, state, DV, out + r * DV, DV, false);
}

struct Spec {
    int kind;          // Kind
    int d, m;          // input width, projected width (= d without projection); features: m, or 2m for TRIG
    const float* w;    // (heads_w, d, m) projection, or null (identity, m = d)
    int64_t heads_w;   // projections held (1 = shared by every head); head bh uses w[bh % heads_w]
    float norm_coef;   // FAVOR keys: exponent - norm_coef |x|^2
    int unit;          // normalise x to x / (|x| + unit_eps) first (RFA)
    float unit_eps;
    float floor = 0.0f;            // the paper maps: PELU's floor, SOFTPLUS's added floor, every key normaliser's guard
    float bias = 0.0f;             // PELU: elu(u + bias)
    const float* phase = nullptr;  // COS2: (heads_w, m) phases, head bh's at phase[(bh % heads_w) m]
    bool exp_values() const { return kind == FAVOR || kind == SOFTMAX; }
    bool l1() const { return kind >= SOFTMAX; }  // keys reweighted by sqrt(M) / max(sum f, floor)
    bool via_u() const { return kind == TRIG || kind == COS2; }  // the projection kept apart from the features
    // COS2's phases of the head whose projection is w (a pointer into s.w)
    const float* phase_of(const float* w) const {
        return phase == nullptr ? nullptr : phase + (w - this->w) / (static_cast<int64_t>(d) * m) * m;
    }
};

// log(1 + y) for y in [0, 1]: 2 atanh(z), z = y / (2 + y) in [0, 1/3], by its series to z^17 (relative error below
// 1e-8 there; no 1 + y rounding for small y)
template <class V>
inline V vlog1p_unit(V y) {
    V z = y / (y + 2.0f), z2 = z * z;
    V p = same<V>(1.0f / 17);
    p = p * z2 + 1.0f / 15;
    p = p * z2 + 1.0f / 13;
    p = p * z2 + 1.0f / 11;
    p = p * z2 + 1.0f / 9;
    p = p * z2 + 1.0f / 7;
    p = p * z2 + 1.0f / 5;
    p = p * z2 + 1.0f / 3;
    p = p * z2 + 1.0f;
    return 2.0f * z * p;
}

// softplus(a) = max(a, 0) + log(1 + exp(-|a|))
template <class V>
inline V vsoftplus(V a) {
    V abs_a = a < 0.0f ? -a : a;
    return (a > 0.0f ? a : V{}) + vlog1p_unit(vexp(-abs_a));
}

template <class V>
inline V vsqrt(V a) {
    V r;
    for (int i = 0; i < static_cast<int>(sizeof(V) / sizeof(float)); ++i) r[i] = std::sqrt(a[i]);
    return r;
}

// sum_m phi of a row of f features, the l1 normaliser
inline float row_sum(const float* phi, int f) {
    v16 acc = {};
    for (int c = 0; c < f; c += 16) acc += load(phi + c);
    return hsum(acc);
}

// features of `rows` rows of x into phi (rows x features); row_max (FAVOR) gets each row's largest projection
void features(const Spec& s, const float* x, const float* w, int rows, float* u, float* phi, float* row_max,
              float* unit_buf) {
    const int d = s.d, m = s.m;
    if (s.unit) {
        for (int r = 0; r < rows; ++r) {
            float inv = 1.0f / (std::sqrt(squared_norm(x + r * d, d)) + s.unit_eps);
            for (int i = 0; i < d; i += 16) store(unit_buf + r * d + i, load(x + r * d + i) * inv);
        }
        x = unit_buf;
    }
    const float* proj = x;
    if (w != nullptr) {
        project(x, rows, d, w, m, s.via_u() ? u : phi);
        proj = s.via_u() ? u : phi;
    }
    if (s.exp_values()) {
        for (int r = 0; r < rows; ++r) {
            float* row = phi + r * m;
            vl mx = same<vl>(NEG_INF);
            for (int c = 0; c < m; c += LANES) { vl a = loadl(row + c); mx = a > mx ? a : mx; }
            float top = hmax(mx);
            row_max[r] = top;
            for (int c = 0; c < m; c += LANES) storel(row + c, vexp(loadl(row + c) - top));
        }
    } else if (s.kind == ELU) {
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < m; c += LANES) {
                vl a = loadl(proj + r * m + c);
                storel(phi + r * m + c, a > 0.0f ? a + 1.0f : vexp(a));
            }
    } else if (s.kind == PELU) {
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < m; c += LANES) {
                vl a = loadl(proj + r * m + c) + s.bias;
                vl e = a > 0.0f ? a + 1.0f : vexp(a);
                storel(phi + r * m + c, e > s.floor ? e : same<vl>(s.floor));
            }
    } else if (s.kind == SOFTPLUS) {
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < m; c += LANES) storel(phi + r * m + c, vsoftplus(loadl(proj + r * m + c)) + s.floor);
    } else if (s.kind == SIGMOID2) {
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < m; c += LANES) {
                vl sg = 1.0f / (vexp(-loadl(proj + r * m + c)) + 1.0f);
                storel(phi + r * m + c, sg * sg);
            }
    } else if (s.kind == COS2) {
        const float* phase = s.phase_of(w);
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < m; c += LANES) {
                vl sn, cs;
                vsincos(loadl(proj + r * m + c) + loadl(phase + c), &sn, &cs);
                storel(phi + r * m + c, cs * cs);
            }
    } else {
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < m; c += LANES) {
                vl sn, cs;
                vsincos(loadl(proj + r * m + c), &sn, &cs);
                storel(phi + r * 2 * m + c, sn);
                storel(phi + r * 2 * m + m + c, cs);
            }
    }
}

struct Buffers {
    float *u, *phi, *vals, *row_max, *weight, *unit, *out;
    int rows;
    explicit Buffers(const Spec& s, int dv) {
        int f = s.kind == TRIG ? 2 * s.m : s.m;
        rows = block_rows();
        const int ROWS = rows;
        size_t bytes = sizeof(float) * (ROWS * (s.m + f + 2 * dv + 2 + s.d) + 16 * 7);
        u = static_cast<float*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64));
        phi = u + ROWS * s.m + 16;
        vals = phi + ROWS * f + 16;
        row_max = vals + ROWS * dv + 16;
        weight = row_max + ROWS + 16;
        unit = weight + ROWS + 16;
        out = unit + ROWS * s.d + 16;
    }
    ~Buffers() { std::free(u); }
};

// A pool of helper threads that never holds the calling thread back for a thread the scheduler has not given a core:
// the caller runs its share of a job's units (claimed one at a time from a shared counter), helpers join as they get
// to run, and when no unit is left the caller waits only for the units already running, never for a helper that
// has not arrived (a team barrier, as OpenMP's at the end of each parallel region, waited a whole time slice of the
// other jobs sharing the cores for such a helper: 30-100 ms for a call of 0.05-1 ms). A late helper finds the job
// closed and leaves it alone. Idle helpers spin for a while (spin_ns), then sleep on a condition variable; the pool is made on
// first use and never destroyed (its helpers may still sleep at exit). One job at a time: a second caller meanwhile
// runs its job alone. Work is split the same way whoever runs it, so results do not depend on the threads.
inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

inline int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

class Pool {
public:
    // how long an idle helper spins before it sleeps: a kernel's next parallel pass follows within microseconds;
    // ATTNBENCH_NATIVE_SPIN_US overrides it for experiments
    static int64_t spin_ns() {
        static const int64_t ns = [] {
            const char* e = std::getenv("ATTNBENCH_NATIVE_SPIN_US");
            return e ? std::atoll(e) * 1000 : 50000;
        }();
        return ns;
    }

    static Pool& get() {
        static Pool* pool = new Pool();
        return *pool;
    }

    // work(t) on the calling thread (t = 0) and on helpers as they arrive (t = 1 .. threads - 1, each at most once)
    template <typename Work>
    void run(int threads, Work& work) {
        std::unique_lock<std::mutex> own(dispatch_, std::try_to_lock);
        if (threads <= 1 || !own.owns_lock()) {
            work(0);
            return;
        }
        while (static_cast<int>(helpers_.size()) < threads - 1) helpers_.emplace_back([this] { serve(); });
        team_ = threads;
        work_ = &work;
        invoke_ = [](void* w, int t) { (*static_cast<Work*>(w))(t); };
        slots_.store(1);
        closed_.store(false);
        generation_.fetch_add(1);
        {
            std::lock_guard<std::mutex> lock(sleep_);
            if (sleeping_ > 0) wake_.notify_all();
        }
        work(0);
        closed_.store(true);  // from here a helper that arrives does nothing; wait for those inside
        for (int64_t start = now_ns(), i = 0; active_.load() != 0; ++i) {
            relax();
            if (i % 64 == 0 && now_ns() - start > spin_ns()) std::this_thread::yield();
        }
    }

private:
    std::mutex dispatch_, sleep_;
    std::condition_variable wake_;
    std::vector<std::thread> helpers_;
    std::atomic<uint64_t> generation_{0};
    std::atomic<bool> closed_{true};
    std::atomic<int> active_{0}, slots_{0};
    int team_ = 0, sleeping_ = 0;  // sleeping_ guarded by sleep_
    void* work_ = nullptr;
    void (*invoke_)(void*, int) = nullptr;

    void serve() {
        uint64_t seen = generation_.load();
        for (;;) {
            for (int64_t start = now_ns(), i = 0; generation_.load() == seen; ++i) {
                relax();
                if (i % 64 == 0 && now_ns() - start > spin_ns()) {
                    std::unique_lock<std::mutex> lock(sleep_);
                    ++sleeping_;
                    wake_.wait(lock, [&] { return generation_.load() != seen; });
                    --sleeping_;
                }
            }
            seen = generation_.load();
            active_.fetch_add(1);  // then closed_ read: the caller sets closed_ before it reads active_
            if (!closed_.load()) {
                const int t = slots_.fetch_add(1);
                if (t < team_) invoke_(work_, t);
            }
            active_.fetch_sub(1);
        }
    }
};

// the units of work: `unit_rows` rows of one (batch, head), taken by the threads one at a time from a shared
// counter, so a core that runs slower takes fewer and the caller can finish them alone (Pool); fn(thread, bh, r0, r1)
constexpr int64_t UNIT_ROWS = 256;

// the least work (multiply-adds, about 10-20 us of a core here) worth a thread: a helper costs microseconds to wake
// and, taken off its core by the scheduler while it holds a unit, a time slice to the caller that waits for that unit
constexpr double THREAD_WORK = 1 << 21;

// the threads worth using: at most `threads`, the CPUs this process may run on, and one per THREAD_WORK of `work`
int team(int threads, double work) {
    cpu_set_t cpus;
    const int usable = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : threads;
    const double worth = work / THREAD_WORK;
    int t = threads < usable ? threads : usable;
    t = worth < t ? static_cast<int>(worth) : t;
    return t < 1 ? 1 : t;
}

// row_cost: the multiply-adds of one row (of n), for the team's size
template <typename Fn>
void parallel_units(int threads, int64_t heads, int64_t n, int64_t unit_rows, double row_cost, Fn&& fn) {
    const int64_t per_head = (n + unit_rows - 1) / unit_rows, units = heads * per_head;
    threads = team(threads, row_cost * static_cast<double>(heads * n));
    if (threads > units) threads = static_cast<int>(units > 0 ? units : 1);
    std::atomic<int64_t> next{0};
    auto worker = [&](int t) {
        for (int64_t u = next.fetch_add(1); u < units; u = next.fetch_add(1)) {
            const int64_t bh = u / per_head, r0 = (u % per_head) * unit_rows;
            fn(t, bh, r0, r0 + unit_rows < n ? r0 + unit_rows : n);
        }
    };
    Pool::get().run(threads, worker);
}

// per-thread scratch of type B (Buffers, BackwardBuffers: made from the spec and the value width), made by the
// thread on its first unit
template <typename B>
struct ThreadBuffers {
    std::vector<std::unique_ptr<B>> held;
    const Spec& spec;
    int dv;
    ThreadBuffers(int threads, const Spec& s, int width) : held(threads), spec(s), dv(width) {}
    B& operator[](int t) {
        if (!held[t]) held[t].reset(new B(spec, dv));
        return *held[t];
    }
};

// key sums of rows [r0, r1) of one head into state (F x DV), sums (F), value_sum (DV, or null), relative to
// exp(running) for FAVOR (raised, with the sums rescaled, when a block's exponents exceed it); the head's features
// (n x F, padded rows 0) and row maxima (n) go to keep_phi and keep_row_max too when given (training)
template <int NV>
void keys_range(const Spec& s, Buffers& buf, const float* x, const float* vh, const uint8_t* mask, const float* w,
                int64_t r0, int64_t r1, float* state, float* sums, float* value_sum, float& running, float* keep_phi,
                float* keep_row_max) {
    constexpr int DV = 16 * NV;
    const int f = s.kind == TRIG ? 2 * s.m : s.m;
    for (int64_t start = r0; start < r1; start += buf.rows) {
        const int rows = static_cast<int>(r1 - start < buf.rows ? r1 - start : buf.rows);
        // the features straight into the kept tensor when training keeps them (copied there, they had taken a
        // second pass), else into the block's buffer
        float* phi = keep_phi != nullptr ? keep_phi + start * f : buf.phi;
        float* row_max = keep_row_max != nullptr ? keep_row_max + start : buf.row_max;
        features(s, x + start * s.d, w, rows, buf.u, phi, row_max, buf.unit);
        float block_max = NEG_INF;
        for (int r = 0; r < rows; ++r) {
            bool keep = mask == nullptr || mask[start + r];
            float c = 0.0f;
            if (s.kind == FAVOR) c = row_max[r] - s.norm_coef * squared_norm(x + (start + r) * s.d, s.d);
            buf.weight[r] = keep ? c : NEG_INF;
            if (!keep) std::memset(phi + r * f, 0, sizeof(float) * f);  // padded features may be inf
            block_max = buf.weight[r] > block_max ? buf.weight[r] : block_max;
        }
        if (block_max == NEG_INF) continue;  // no real key in this block
        if (s.kind == FAVOR && block_max > running) {
            if (running != NEG_INF) {
                float factor = std::exp(running - block_max);
                for (int i = 0; i < f * DV; ++i) state[i] *= factor;
                for (int i = 0; i < f; ++i) sums[i] *= factor;
            }
            running = block_max;
        }
        const int64_t next = start + rows, next_rows = r1 - next < buf.rows ? r1 - next : buf.rows;
        Prefetch pf;  // the next block's k and v rows, over this block's tiles
        const int tiles = (f + tile_rows<NV>() - 1) / tile_rows<NV>();
        pf.plan(x + next * s.d, next_rows > 0 ? next_rows * s.d : 0, tiles, 0);
        pf.plan(vh + next * DV, next_rows > 0 ? next_rows * DV : 0, tiles, 1);
        bool unweighted = s.kind != FAVOR && !s.l1() && mask == nullptr;  // every weight 1: v as it is
        const float root_m = std::sqrt(static_cast<float>(s.m));
        for (int r = 0; r < rows; ++r) {
            const bool keep = buf.weight[r] != NEG_INF;
            float wr = !keep ? 0.0f : (s.kind == FAVOR ? std::exp(buf.weight[r] - running) : 1.0f);
            if (keep && s.l1()) wr = root_m / std::max(row_sum(phi + r * f, f), s.floor);
            buf.weight[r] = wr;
            if (!unweighted)
                for (int c = 0; c < DV; c += 16) store(buf.vals + r * DV + c, load(vh + (start + r) * DV + c) * wr);
            if (value_sum != nullptr && keep)  // sum of the real rows' v (for a map's offset)
                for (int c = 0; c < DV; c += 16)
                    store(value_sum + c, load(value_sum + c) + load(vh + (start + r) * DV + c));
        }
        for (int c = 0; c < f; c += 64) {  // sums += phi^T w, four vectors of features at a time in registers
            const int width = f - c < 64 ? f - c : 64;
            v16 acc[4];
            for (int j = 0; j < width; j += 16) acc[j / 16] = load(sums + c + j);
            for (int r = 0; r < rows; ++r)
                for (int j = 0; j < width; j += 16) acc[j / 16] += load(phi + r * f + c + j) * buf.weight[r];
            for (int j = 0; j < width; j += 16) store(sums + c + j, acc[j / 16]);
        }
        accumulate<NV>(phi, f, rows, unweighted ? vh + start * DV : buf.vals, state, &pf);
    }
}

// Reductions (key sums and their like) are deterministic whatever the threads do: each head's rows fall into at
// most GROUPS consecutive groups of at least MIN_GROUP_ROWS rows, fixed by n alone, each summed into its own slot
// by whichever thread takes it, and each head's slots are merged in order. Results are thus the same for every
// thread count and schedule.
constexpr int64_t GROUPS = 16, MIN_GROUP_ROWS = 256;

struct Groups {
    int64_t rows, count;  // rows per group (whole 32-row blocks, at least MIN_GROUP_ROWS), groups per head
    explicit Groups(int64_t n) : rows(((n + GROUPS - 1) / GROUPS + 31) / 32 * 32), count(1) {
        rows = rows < MIN_GROUP_ROWS ? MIN_GROUP_ROWS : rows;
        count = n > 0 ? (n + rows - 1) / rows : 1;
    }
    int64_t slot(int64_t bh, int64_t r0) const { return bh * count + r0 / rows; }
};

// per-slot partial sums. Each slot is cleared by the unit that fills it, on that unit's thread (cleared up front,
// a megabyte of slots at 1024 tokens had taken a serial pass before the threads started); all of them up front only
// where no unit runs (an empty sequence)
struct Partial {
    int64_t state_size, sums_size, dv, running_size;
    std::unique_ptr<float[]> state, sums, value_sum, running;
    Partial(int64_t slots, int64_t state_floats, int64_t sums_floats, int64_t dv_floats, int64_t running_floats,
            bool clear_all)
        : state_size(state_floats), sums_size(sums_floats), dv(dv_floats), running_size(running_floats),
          state(new float[slots * state_floats]), sums(new float[slots * sums_floats]),
          value_sum(new float[slots * dv_floats]), running(new float[slots * running_floats]) {
        for (int64_t at = 0; clear_all && at < slots; ++at) clear(at);
    }
    void clear(int64_t at) {
        std::fill_n(state.get() + at * state_size, state_size, 0.0f);
        std::fill_n(sums.get() + at * sums_size, sums_size, 0.0f);
        std::fill_n(value_sum.get() + at * dv, dv, 0.0f);
        std::fill_n(running.get() + at * running_size, running_size, NEG_INF);
    }
};

// out (size floats) = the sum of `count` consecutive slots of `size` floats from slot `first`, in slot order
void sum_slots(const float* slots, int64_t size, int64_t first, int64_t count, float* out) {
    std::fill_n(out, size, 0.0f);
    for (int64_t at = first; at < first + count; ++at)
        for (int64_t i = 0; i < size; ++i) out[i] += slots[at * size + i];
}

// per-slot partial sums of one more array beside Partial's (a projection's gradient), cleared as Partial's are:
// by the unit that fills the slot, all of them up front only where no unit runs (an empty sequence)
struct Slots {
    Scratch data;
    int64_t size;
    Slots(int64_t slots, int64_t floats, bool clear_all) : data(slots * floats), size(floats) {
        if (clear_all) std::fill_n(data.data(), slots * floats, 0.0f);
    }
    float* clear(int64_t at) const {  // the slot, cleared
        std::fill_n(data.data() + at * size, size, 0.0f);
        return data.data() + at * size;
    }
};

// Each head's end of real rows: one past its batch row's last real key (0 for none), or null without a mask. Rows
// from there on are padding: keys there contribute nothing, so every pass skips them (a right-padded batch of
// sentences is about half padding), and query rows there are skipped where the caller never reads them
// (`skip_queries`: their outputs and gradients are written as 0). Real rows compute exactly as without skipping.
std::vector<int64_t> real_ends(const uint8_t* real, int64_t heads, int64_t h, int64_t n) {
    std::vector<int64_t> ends;
    if (real == nullptr) return ends;
    ends.resize(heads);
    for (int64_t b = 0; b < heads / h; ++b) {
        int64_t end = n;
        while (end > 0 && real[b * n + end - 1] == 0) --end;
        for (int64_t i = 0; i < h; ++i) ends[b * h + i] = end;
    }
    return ends;
}

// rows [r0, stop) of [r0, r1) to compute for head bh, stop = min(r1, its end) (r1 with no ends)
inline int64_t real_stop(const int64_t* ends, int64_t bh, int64_t r0, int64_t r1) {
    return ends == nullptr ? r1 : std::max(r0, std::min(r1, ends[bh]));
}

// rows [r0, r1) of a head's (n x width) output zeroed
inline void zero_rows(float* x, int64_t width, int64_t r0, int64_t r1) {
    if (r1 > r0) std::memset(x + r0 * width, 0, sizeof(float) * (r1 - r0) * width);
}

// finish(bh) runs on head bh's merged sums, in the merge's unit (one parallel region for both)
template <int NV, typename Finish>
void keys_impl(const Spec& s, const float* k, const float* v, const uint8_t* real, int64_t heads, int64_t h,
               int64_t n, int threads, float* kv, float* ksum, float* log_max, float* value_sum, float* keep_phi,
               float* keep_row_max, const int64_t* ends, Finish&& finish) {
    constexpr int DV = 16 * NV;
    const int f = s.kind == TRIG ? 2 * s.m : s.m;
    const Groups groups(n);
    Partial p(heads * groups.count, f * DV, f, DV, 1, n == 0);
    const double row_cost = static_cast<double>(s.d) * (s.w == nullptr ? 1 : s.m) + f * (DV + 1);
    ThreadBuffers<Buffers> bufs(threads, s, DV);
    parallel_units(threads, heads, n, groups.rows, row_cost, [&](int t, int64_t bh, int64_t r0, int64_t r1) {
        const int64_t at = groups.slot(bh, r0);
        p.clear(at);
        keys_range<NV>(s, bufs[t], k + bh * n * s.d, v + bh * n * DV, real == nullptr ? nullptr : real + (bh / h) * n,
                       s.w == nullptr ? nullptr : s.w + (bh % s.heads_w) * s.d * s.m, r0,
                       real_stop(ends, bh, r0, r1), p.state.get() + at * f * DV, p.sums.get() + at * f,
                       value_sum == nullptr ? nullptr : p.value_sum.get() + at * DV, p.running[at],
                       keep_phi == nullptr ? nullptr : keep_phi + bh * n * f,
                       keep_row_max == nullptr ? nullptr : keep_row_max + bh * n);
    });
    // merge the groups' sums in order, at the largest of their scales: a head a unit
    parallel_units(threads, heads, 1, 1, groups.count * f * (DV + 1.0), [&](int, int64_t bh, int64_t, int64_t) {
        float top = NEG_INF;
        for (int64_t at = bh * groups.count; at < (bh + 1) * groups.count; ++at)
            top = p.running[at] > top ? p.running[at] : top;
        float* state = kv + bh * f * DV;
        float* sums = ksum + bh * f;
        std::memset(state, 0, sizeof(float) * f * DV);
        std::memset(sums, 0, sizeof(float) * f);
        if (value_sum != nullptr) std::memset(value_sum + bh * DV, 0, sizeof(float) * DV);
        for (int64_t at = bh * groups.count; at < (bh + 1) * groups.count; ++at) {
            if (value_sum != nullptr)
                for (int c = 0; c < DV; ++c) value_sum[bh * DV + c] += p.value_sum[at * DV + c];
            float factor = s.kind != FAVOR ? 1.0f : p.running[at] == NEG_INF ? 0.0f : std::exp(p.running[at] - top);
            if (factor == 0.0f) continue;
            for (int64_t i = 0; i < f * DV; ++i) state[i] += factor * p.state[at * f * DV + i];
            for (int i = 0; i < f; ++i) sums[i] += factor * p.sums[at * f + i];
        }
        if (log_max != nullptr) log_max[bh] = top;
        finish(bh);
    });
}

// a depthwise convolution along the sequence added to the outputs (Nystromformer's skip over V): out_i +=
// sum_t w[head][t] v_{i + t - size/2}, zero outside the sequence, as nn.Conv2d(H, H, (size, 1), groups=H)
struct Conv {
    const float* v = nullptr;  // (heads, n, dv), or null for none
    const float* w = nullptr;  // (h, size)
    int size = 0;
    int64_t h = 1;

    // value (16 NV floats) += row i of head bh's convolution
    template <int NV>
    void add(int64_t bh, int64_t n, int64_t i, v16* value) const {
        constexpr int DV = 16 * NV;
        const int64_t half = size / 2;
        const float* taps = w + (bh % h) * size;
        const float* vh = v + bh * n * DV;
        const int t0 = i - half < 0 ? static_cast<int>(half - i) : 0;
        const int t1 = i - half + size > n ? static_cast<int>(n - i + half) : size;
        for (int t = t0; t < t1; ++t)
            for (int c = 0; c < NV; ++c) value[c] += taps[t] * load(vh + (i + t - half) * DV + 16 * c);
    }
};

// out (heads, n, 16 NV) = the convolution alone (Nystromformer's skip over V in training, and with the taps reversed
// its gradient), units of rows on `threads` threads
template <int NV>
void conv_impl(const Conv& conv, int64_t heads, int64_t n, int threads, float* out) {
    constexpr int DV = 16 * NV;
    parallel_units(threads, heads, n, UNIT_ROWS, static_cast<double>(DV) * conv.size,
                   [&](int, int64_t bh, int64_t r0, int64_t r1) {
        for (int64_t i = r0; i < r1; ++i) {
            v16 value[NV] = {};
            conv.add<NV>(bh, n, i, value);
            for (int c = 0; c < NV; ++c) store(out + (bh * n + i) * DV + 16 * c, value[c]);
        }
    });
}

// the taps' gradient of sum(g * conv(v)) for each of `heads` sequences: dw (heads x size), dw[bh][t] = sum_i
// g_i . v_{i + t - size/2} (zero outside), each a vector sum over i in a fixed order, then across its lanes. Units of
// TG taps of one head on `threads` threads; within a unit, the rows every tap of the group reads run with the TG
// taps' sums in registers (each g row loaded once for all of them; tap by tap they had streamed g and v TG times)
template <int NV>
void conv_weight_grad_impl(const float* g, const float* v, int64_t heads, int64_t n, int size, int threads,
                           float* dw) {
    constexpr int DV = 16 * NV, TG = NV >= 8 ? 2 : 24 / NV;  // TG x NV sums and NV of g within the 32 registers
    const int64_t half = size / 2, groups = (size + TG - 1) / TG;
    parallel_units(threads, heads, groups, 1, static_cast<double>(n) * DV * TG,
                   [&](int, int64_t bh, int64_t group, int64_t) {
        const float* gh = g + bh * n * DV;
        const float* vh = v + bh * n * DV;
        const int t0 = static_cast<int>(group * TG), count = size - t0 < TG ? size - t0 : TG;
        v16 acc[TG][NV] = {};
        auto shift = [&](int j) { return t0 + j - half; };
        auto first = [&](int j) { return shift(j) < 0 ? -shift(j) : int64_t{0}; };  // tap j's rows: [first, stop)
        auto stop = [&](int j) { return shift(j) > 0 ? n - shift(j) : n; };
        auto rows = [&](int j, int64_t from, int64_t to) {
            for (int64_t i = from; i < to; ++i)
                for (int c = 0; c < NV; ++c)
                    acc[j][c] += load(gh + i * DV + 16 * c) * load(vh + (i + shift(j)) * DV + 16 * c);
        };
        const int64_t lo = first(0), hi = stop(count - 1) > lo ? stop(count - 1) : lo;  // rows of every tap
        for (int j = 0; j < count; ++j) rows(j, first(j), lo < stop(j) ? lo : stop(j));
        if (count == TG) {
            for (int64_t i = lo; i < hi; ++i) {
                v16 gi[NV];
                for (int c = 0; c < NV; ++c) gi[c] = load(gh + i * DV + 16 * c);
#pragma GCC unroll 24
                for (int j = 0; j < TG; ++j)
                    for (int c = 0; c < NV; ++c) acc[j][c] += gi[c] * load(vh + (i + shift(j)) * DV + 16 * c);
            }
        } else {
            for (int j = 0; j < count; ++j) rows(j, lo, hi);
        }
        for (int j = 0; j < count; ++j) rows(j, hi > first(j) ? hi : first(j), stop(j));
        for (int j = 0; j < count; ++j) {
            for (int c = 1; c < NV; ++c) acc[j][0] += acc[j][c];
            dw[bh * size + t0 + j] = hsum(acc[j][0]);
        }
    });
}

// softmax over the rows of every column: for each column l of u = k w, acc_l = sum_j exp(u_jl - max_l) v_j and
// total_l = sum_j exp(u_jl - max_l), max_l the column's running maximum over real rows (Nystromformer's landmark
// queries attending to all keys; as flash attention, with the landmarks as the queries)
template <int NV>
void softmax_columns_range(const Spec& s, Buffers& buf, const float* x, const float* vh, const uint8_t* mask,
                           const float* w, int64_t r0, int64_t r1, float* state, float* sums, float* running) {
    constexpr int DV = 16 * NV;
    const int m = s.m;
    float* block_max = buf.unit;  // the column maxima and rescaling factors: 2 m floats of the unit-norm scratch
    float* factor = buf.unit + m;
    for (int64_t start = r0; start < r1; start += buf.rows) {
        const int rows = static_cast<int>(r1 - start < buf.rows ? r1 - start : buf.rows);
        project(x + start * s.d, rows, s.d, w, m, buf.phi);
        int real_rows = 0;
        for (int c = 0; c < m; c += LANES) storel(block_max + c, same<vl>(NEG_INF));
        for (int r = 0; r < rows; ++r) {
            if (mask != nullptr && !mask[start + r]) continue;
            ++real_rows;
            for (int c = 0; c < m; c += LANES) {
                vl a = loadl(buf.phi + r * m + c), b = loadl(block_max + c);
                storel(block_max + c, a > b ? a : b);
            }
        }
        if (real_rows == 0) continue;
        vl raised = {};
        for (int c = 0; c < m; c += LANES) {  // running max and the factor exp(old - new) that rescales the sums
            vl before = loadl(running + c), block = loadl(block_max + c);
            vl top = block > before ? block : before;
            storel(factor + c, before == NEG_INF ? vl{} : vexp(before - top));
            raised = top != before ? same<vl>(1.0f) : raised;
            storel(running + c, top);
        }
        if (hmax(raised) > 0.0f)
            for (int l = 0; l < m; ++l) {
                sums[l] *= factor[l];
                for (int c = 0; c < DV; c += 16) store(state + l * DV + c, load(state + l * DV + c) * factor[l]);
            }
        for (int r = 0; r < rows; ++r) {
            float* row = buf.phi + r * m;
            if (mask != nullptr && !mask[start + r]) {
                std::memset(row, 0, sizeof(float) * m);
                continue;
            }
            for (int c = 0; c < m; c += LANES) {
                vl e = vexp(loadl(row + c) - loadl(running + c));
                storel(row + c, e);
                storel(sums + c, loadl(sums + c) + e);
            }
        }
        const int64_t next = start + rows, next_rows = r1 - next < buf.rows ? r1 - next : buf.rows;
        Prefetch pf;
        const int tiles = (m + tile_rows<NV>() - 1) / tile_rows<NV>();
        pf.plan(x + next * s.d, next_rows > 0 ? next_rows * s.d : 0, tiles, 0);
        pf.plan(vh + next * DV, next_rows > 0 ? next_rows * DV : 0, tiles, 1);
        accumulate<NV>(buf.phi, m, rows, vh + start * DV, state, &pf);
    }
}

template <int NV>
void softmax_columns_impl(const Spec& s, const float* k, const float* v, const uint8_t* real, int64_t heads,
                          int64_t h, int64_t n, int threads, float* acc, float* total, float* col_max) {
    constexpr int DV = 16 * NV;
    const int m = s.m;
    const Groups groups(n);
    Partial p(heads * groups.count, m * DV, m, 0, m, n == 0);
    Spec wide = s;  // its unit-norm scratch (rows x d floats) must hold the 2 m floats of column maxima and factors
    wide.d = s.d > m ? s.d : m;
    ThreadBuffers<Buffers> bufs(threads, wide, DV);
    parallel_units(threads, heads, n, groups.rows, static_cast<double>(m) * (s.d + DV + 1),
                   [&](int t, int64_t bh, int64_t r0, int64_t r1) {
        const int64_t at = groups.slot(bh, r0);
        p.clear(at);
        softmax_columns_range<NV>(s, bufs[t], k + bh * n * s.d, v + bh * n * DV,
                                  real == nullptr ? nullptr : real + (bh / h) * n, s.w + (bh % s.heads_w) * s.d * m,
                                  r0, r1, p.state.get() + at * m * DV, p.sums.get() + at * m,
                                  p.running.get() + at * m);
    });
    for (int64_t bh = 0; bh < heads; ++bh)  // merge per column, groups in order, at the largest of their maxima
        for (int l = 0; l < m; ++l) {
            const int64_t out = bh * m + l;
            float top = NEG_INF;
            for (int64_t g = 0; g < groups.count; ++g) {
                const float r = p.running[(bh * groups.count + g) * m + l];
                top = r > top ? r : top;
            }
            float* state = acc + out * DV;
            std::memset(state, 0, sizeof(float) * DV);
            total[out] = 0.0f;
            col_max[out] = top;
            for (int64_t g = 0; g < groups.count; ++g) {
                const int64_t at = (bh * groups.count + g) * m + l;
                if (p.running[at] == NEG_INF) continue;
                const float factor = std::exp(p.running[at] - top);
                total[out] += factor * p.sums[at];
                for (int c = 0; c < DV; ++c) state[c] += factor * p.state[at * DV + c];
            }
        }
}

template <int NV>
void queries_range(const Spec& s, Buffers& buf, const float* x, const float* w, const float* state, const float* sums,
                   const float* offset_kv, float offset_den, int64_t n, int64_t bh, int64_t r0, int64_t r1, float eps,
                   float* o, const Conv& conv, float* keep_phi) {
    constexpr int DV = 16 * NV;
    const int f = s.kind == TRIG ? 2 * s.m : s.m;
    for (int64_t start = r0; start < r1; start += buf.rows) {
        const int rows = static_cast<int>(r1 - start < buf.rows ? r1 - start : buf.rows);
        float* phi = keep_phi != nullptr ? keep_phi + start * f : buf.phi;  // as in keys_range
        features(s, x + start * s.d, w, rows, buf.u, phi, buf.row_max, buf.unit);
        const int64_t next = start + rows, next_rows = r1 - next < buf.rows ? r1 - next : buf.rows;
        Prefetch pf;
        pf.plan(x + next * s.d, next_rows > 0 ? next_rows * s.d : 0, (rows + tile_rows<NV>() - 1) / tile_rows<NV>());
        float* num = buf.out;  // the block's numerators in cache; normalised outputs go to memory by streaming stores
        apply<NV>(phi, f, rows, state, num, &pf);
        float* o_block = o + start * DV;
        const float root_m = std::sqrt(static_cast<float>(s.m));
        for (int r = 0; r < rows; ++r) {
            v16 acc = {};
            for (int c = 0; c < f; c += 16) acc += load(phi + r * f + c) * load(sums + c);
            // the paper maps' query weight sqrt(M) / max(Z, floor): it cancels in the ratio unless the guard acts
            const float wq = s.l1() ? root_m / std::max(row_sum(phi + r * f, f), s.floor) : 1.0f;
            float den = wq * hsum(acc) + offset_den;
            den = den >= 0 ? (den > eps ? den : eps) : (den < -eps ? den : -eps);
            const float inv = 1.0f / den;
            v16 value[NV];
            for (int c = 0; c < NV; ++c) {
                value[c] = load(num + r * DV + 16 * c) * wq;
                if (offset_kv != nullptr) value[c] += load(offset_kv + 16 * c);
                value[c] *= inv;
            }
            if (conv.v != nullptr) conv.add<NV>(bh, n, start + r, value);
            for (int c = 0; c < NV; ++c) stream(o_block + r * DV + 16 * c, value[c]);
        }
    }
#if defined(__AVX512F__)
    __builtin_ia32_sfence();  // the streaming stores visible before the unit counts as done
#endif
}

template <int NV>
void queries_impl(const Spec& s, const float* q, const float* kv, const float* ksum, const float* offset_kv,
                  const float* offset_den, int64_t heads, int64_t n, int threads, float eps, float* out,
                  const Conv& conv, float* keep_phi = nullptr, const int64_t* ends = nullptr) {
    constexpr int DV = 16 * NV;
    const int f = s.kind == TRIG ? 2 * s.m : s.m;
    const double row_cost = static_cast<double>(s.d) * (s.w == nullptr ? 1 : s.m) + f * (DV + 1);
    ThreadBuffers<Buffers> bufs(threads, s, DV);
    parallel_units(threads, heads, n, UNIT_ROWS, row_cost, [&](int t, int64_t bh, int64_t r0, int64_t r1) {
        const int64_t stop = real_stop(ends, bh, r0, r1);  // ends only where the padded rows go unread
        queries_range<NV>(s, bufs[t], q + bh * n * s.d, s.w == nullptr ? nullptr : s.w + (bh % s.heads_w) * s.d * s.m,
                          kv + bh * f * DV, ksum + bh * f, offset_kv == nullptr ? nullptr : offset_kv + bh * DV,
                          offset_den == nullptr ? 0.0f : offset_den[bh], n, bh, r0, stop, eps, out + bh * n * DV, conv,
                          keep_phi == nullptr ? nullptr : keep_phi + bh * n * f);
        zero_rows(out + bh * n * DV, DV, stop, r1);
    });
}

// What the training forward keeps for the backward: the finished state (s_kv (heads, F, DV), s_ksum (heads, F),
// off_kv (heads, DV), off_den (heads): as the queries meet it) and FAVOR's log-scales (heads); and, when not null,
// the features phi_q, phi_k (heads, n, F) and the keys' row maxima (heads, n), so the backward need not recompute
// them
struct Saved {
    float *s_kv = nullptr, *s_ksum = nullptr, *off_kv = nullptr, *off_den = nullptr, *log_max = nullptr;
    float *phi_q = nullptr, *phi_k = nullptr, *row_max_k = nullptr;
};

// The whole non-causal attention: key sums (keys_impl), the state finished with the features' scale and offset
// (phi = scale (f + offset)) as kernels.linear's _KeyState.finish and _query_state do, then every query row
// (queries_impl); `real` (b, n) or null; `saved` given for training. One call instead of two and a dozen small
// torch operations between them.
template <int NV>
void attention_impl(const Spec& s, const float* q, const float* k, const float* v, const uint8_t* real, int64_t heads,
                    int64_t h, int64_t n, int threads, float scale, float offset, float eps, float* out,
                    const Saved& saved, bool skip_queries) {
    constexpr int DV = 16 * NV;
    const int64_t f = s.kind == TRIG ? 2 * s.m : s.m;
    const bool own = saved.s_kv == nullptr;
    Scratch local(own ? heads * (f * DV + f + DV + 1) : 0), value_sum(offset != 0.0f ? heads * DV : 0);
    float* kv = own ? local.data() : saved.s_kv;
    float* ksum = own ? kv + heads * f * DV : saved.s_ksum;
    float* off_kv = own ? ksum + heads * f : saved.off_kv;
    float* off_den = own ? off_kv + heads * DV : saved.off_den;
    float* value_sum_or_null = offset != 0.0f ? value_sum.data() : nullptr;
    // kv = scale^2 (kv + offset value_sum), ksum alike with the key count; a head in the merge's unit
    auto finish = [&](int64_t bh) {
        float* state = kv + bh * f * DV;
        float* sums = ksum + bh * f;
        float count = static_cast<float>(n);
        if (real != nullptr) {
            int64_t c = 0;
            for (int64_t j = 0; j < n; ++j) c += real[(bh / h) * n + j] != 0;
            count = static_cast<float>(c);
        }
        const float* vs = value_sum_or_null == nullptr ? nullptr : value_sum_or_null + bh * DV;
        for (int64_t i = 0; i < f; ++i) {
            for (int c = 0; c < DV; ++c) {
                float x = vs == nullptr ? state[i * DV + c] : state[i * DV + c] + offset * vs[c];
                state[i * DV + c] = x * scale * scale;
            }
            sums[i] = (vs == nullptr ? sums[i] : sums[i] + offset * count) * scale * scale;
        }
        // offset times the column sums, each still summed over i in order, but a row of 16 NV columns at a time
        // (a loop over i per column was one chain of dependent additions: 0.15 ms of a 2.4 ms call at 1024 tokens)
        v16 column[NV] = {};
        for (int64_t i = 0; i < f; ++i)
            for (int c = 0; c < NV; ++c) column[c] += load(state + i * DV + 16 * c);
        for (int c = 0; c < NV; ++c) store(off_kv + bh * DV + 16 * c, column[c] * offset);
        float acc = 0.0f;
        for (int64_t i = 0; i < f; ++i) acc += sums[i];
        off_den[bh] = offset * acc;
    };
    const std::vector<int64_t> ends = real_ends(real, heads, h, n);
    const int64_t* key_ends = ends.empty() ? nullptr : ends.data();
    keys_impl<NV>(s, k, v, real, heads, h, n, threads, kv, ksum, saved.log_max, value_sum_or_null, saved.phi_k,
                  saved.row_max_k, key_ends, finish);
    queries_impl<NV>(s, q, kv, ksum, offset != 0.0f ? off_kv : nullptr, offset != 0.0f ? off_den : nullptr, heads, n,
                     threads, eps, out, Conv{}, saved.phi_q, skip_queries ? key_ends : nullptr);
}

// means of `segments` equal consecutive segments of rows of each of `heads` (n x d) matrices, for each of two inputs
// (Nystromformer's landmarks of q and k in one pass on `threads` threads); units of one segment of one head
void segment_means(const float* a, const float* b, int64_t heads, int64_t n, int d, int64_t segments, int threads,
                   float* mean_a, float* mean_b) {
    const int64_t length = n / segments;
    // one "head" of one row per (input, head, segment): one unit each, its row range unused
    parallel_units(threads, 2 * heads * segments, 1, 1, static_cast<double>(length) * d,
                   [&](int, int64_t unit, int64_t, int64_t) {
        const int64_t which = unit / (heads * segments), at = unit % (heads * segments);
        const float* x = (which == 0 ? a : b) + at * length * d;  // segment `at % segments` of head `at / segments`
        float* out = (which == 0 ? mean_a : mean_b) + at * d;
        const float inv = 1.0f / static_cast<float>(length);
        for (int c = 0; c < d; c += 16) {
            v16 acc = {};
            for (int64_t r = 0; r < length; ++r) acc += load(x + r * d + c);
            store(out + c, acc * inv);
        }
    });
}

// --- Nystromformer's Newton-Schulz pseudo-inverse (as baselines.nystromformer.iterative_pinv) ------------------
// from a given start z (torch computes it, so that its max-based scale keeps autograd's gradient), `iterations`
// times z = z (13 I - az (15 I - az (7 I - az))) / 4 with az = a z; matrices (size x size), size a multiple of 16,
// one head a unit

// out (cols x rows) = a (rows x cols) transposed
// out (cols x rows) = a (rows x cols)^T. 16 x 16 blocks in registers where both are multiples of 16: four
// butterfly stages, each swapping the off-diagonal s x s sub-blocks of every 2s x 2s block (two-source shuffles),
// 64 shuffles for 256 elements; else (and at the edges) by elements in 16 x 16 tiles
void transpose_matrix(const float* a, int64_t rows, int64_t cols, float* out) {
    constexpr int64_t B = 16;
#if !defined(__AVX512F__)
    // without AVX-512 GCC lowers a two-source shuffle of 64-byte vectors element by element through the stack (a
    // fifth of favor's training step on an AVX2 EPYC): 8 x 8 blocks of 32-byte vectors instead, three stages
    if (rows % 8 == 0 && cols % 8 == 0) {
        for (int64_t i0 = 0; i0 < rows; i0 += 8)
            for (int64_t j0 = 0; j0 < cols; j0 += 8) {
                v8 r[8];
                for (int i = 0; i < 8; ++i) r[i] = load8(a + (i0 + i) * cols + j0);
                for (int w = 4; w >= 1; w /= 2) {
                    vi8 lanes = {0, 1, 2, 3, 4, 5, 6, 7};
                    vi8 low = (lanes & w) == 0 ? lanes : lanes + 8 - w;
                    vi8 high = (lanes & w) == 0 ? lanes + w : lanes + 8;
                    for (int i = 0; i < 8; ++i)
                        if ((i & w) == 0) {
                            v8 x = __builtin_shuffle(r[i], r[i + w], low), y = __builtin_shuffle(r[i], r[i + w], high);
                            r[i] = x;
                            r[i + w] = y;
                        }
                }
                for (int j = 0; j < 8; ++j) std::memcpy(out + (j0 + j) * rows + i0, &r[j], sizeof(v8));
            }
        return;
    }
#endif
    if (rows % B == 0 && cols % B == 0) {
        for (int64_t i0 = 0; i0 < rows; i0 += B)
            for (int64_t j0 = 0; j0 < cols; j0 += B) {
                v16 r[16];
                for (int i = 0; i < 16; ++i) r[i] = load(a + (i0 + i) * cols + j0);
                for (int w = 8; w >= 1; w /= 2) {
                    vi16 lanes = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
                    vi16 low = (lanes & w) == 0 ? lanes : lanes + 16 - w;   // row i: its lanes, then row i + w's
                    vi16 high = (lanes & w) == 0 ? lanes + w : lanes + 16;  // row i + w: row i's, then its own
                    for (int i = 0; i < 16; ++i)
                        if ((i & w) == 0) {
                            v16 x = __builtin_shuffle(r[i], r[i + w], low), y = __builtin_shuffle(r[i], r[i + w], high);
                            r[i] = x;
                            r[i + w] = y;
                        }
                }
                for (int j = 0; j < 16; ++j) store(out + (j0 + j) * rows + i0, r[j]);
            }
        return;
    }
    for (int64_t i0 = 0; i0 < rows; i0 += B)  // row by row, each write had gone to another cache line
        for (int64_t j0 = 0; j0 < cols; j0 += B) {
            const int64_t i1 = i0 + B < rows ? i0 + B : rows, j1 = j0 + B < cols ? j0 + B : cols;
            for (int64_t j = j0; j < j1; ++j)
                for (int64_t i = i0; i < i1; ++i) out[j * rows + i] = a[i * cols + j];
        }
}

// out (heads x cols x rows) = each of `heads` (rows x cols) matrices of a transposed, a head a unit on `threads`
void transpose_heads(const float* a, int64_t heads, int64_t rows, int64_t cols, int threads, float* out) {
    parallel_units(threads, heads, 1, 1, static_cast<double>(rows) * cols, [&](int, int64_t bh, int64_t, int64_t) {
        transpose_matrix(a + bh * rows * cols, rows, cols, out + bh * rows * cols);
    });
}

struct Square {  // products of (size x size) row-major matrices
    int size;
    int64_t area;
    explicit Square(int n) : size(n), area(static_cast<int64_t>(n) * n) {}
    void mul(const float* x, const float* y, float* out) const { project(x, size, size, y, size, out); }
    void mul_transposed(const float* x, const float* y, float* out) const {  // out = x^T y: x read down its columns
        for (int r = 0; r < size; r += 4) project_rows<4>(x + r, 1, size, size, y, size, out + r * size);
    }
    void transpose(const float* x, float* out) const { transpose_matrix(x, size, size, out); }
    void minus_from_identity(float c, const float* x, float* out) const {  // out = c I - x
        for (int64_t e = 0; e < area; ++e) out[e] = -x[e];
        for (int i = 0; i < size; ++i) out[i * size + i] += c;
    }
    void add(const float* x, float* out) const { for (int64_t e = 0; e < area; ++e) out[e] += x[e]; }
};

// the step's intermediates from a and z: p = a z, t1 = 7 I - p, t2 = 15 I - p t1, t3 = 13 I - p t2 (u: scratch)
void pinv_step_parts(const Square& sq, const float* a, const float* z, float* p, float* t1, float* t2, float* t3,
                     float* u) {
    sq.mul(a, z, p);
    sq.minus_from_identity(7.0f, p, t1);
    sq.mul(p, t1, u);
    sq.minus_from_identity(15.0f, u, t2);
    sq.mul(p, t2, u);
    sq.minus_from_identity(13.0f, u, t3);
}

// what a step keeps for the backward: its input z and its intermediates p, t1, t2, t3, one matrix each
constexpr int STEP_PARTS = 5;

// iterations from z (in place, the start given); `store`, when given, gets every step's input z and intermediates
// (iterations x STEP_PARTS x area), so the backward need not recompute them
void pinv_steps(const Square& sq, const float* a, float* z, int iterations, float* store) {
    Scratch local(STEP_PARTS * sq.area), u(sq.area);
    for (int it = 0; it < iterations; ++it) {
        float* parts = store != nullptr ? store + it * STEP_PARTS * sq.area : local.data();
        float *p = parts + sq.area, *t1 = p + sq.area, *t2 = t1 + sq.area, *t3 = t2 + sq.area;
        if (store != nullptr) std::memcpy(parts, z, sizeof(float) * sq.area);
        pinv_step_parts(sq, a, z, p, t1, t2, t3, u.data());
        for (int64_t e = 0; e < sq.area; ++e) u[e] = 0.25f * z[e];
        sq.mul(u.data(), t3, z);
    }
}

// reverse mode through the steps: g (dL/dz after the last step) -> da (dL/da through the steps) and dz0
// (dL/dz at the start), from the stored steps (pinv_steps' store), by the chain rule through z' = z t3 / 4,
// t3 = 13 I - p t2, t2 = 15 I - p t1, t1 = 7 I - p, p = a z, line by line below; products with a transposed left
// factor read it down its columns, a transposed right factor is copied transposed first
void pinv_steps_backward(const Square& sq, const float* a, const float* store, const float* g, int iterations,
                         float* da, float* dz0) {
    const int64_t area = sq.area;
    Scratch buf(6 * area);
    float *gz = buf.data(), *dz = gz + area, *dp = dz + area, *dx = dp + area, *dy = dx + area, *u = dy + area;
    Scratch tr(area);
    std::memcpy(gz, g, sizeof(float) * area);
    std::memset(da, 0, sizeof(float) * area);
    for (int it = iterations - 1; it >= 0; --it) {
        const float* z = store + it * STEP_PARTS * area;
        const float *p = z + area, *t1 = p + area, *t2 = t1 + area, *t3 = t2 + area;
        sq.transpose(t3, tr.data());
        sq.mul(gz, tr.data(), dz);                             // dz = g t3^T / 4 (scaled below)
        for (int64_t e = 0; e < area; ++e) dz[e] *= 0.25f;
        sq.mul_transposed(z, gz, dx);                          // dt3 = z^T g / 4; dv = -dt3
        for (int64_t e = 0; e < area; ++e) dx[e] *= -0.25f;    // dx = dv
        sq.transpose(t2, tr.data());
        sq.mul(dx, tr.data(), dp);                             // dp = dv t2^T
        sq.mul_transposed(p, dx, dy);                          // dt2 = p^T dv; du = -dt2
        for (int64_t e = 0; e < area; ++e) dy[e] = -dy[e];     // dy = du
        sq.transpose(t1, tr.data());
        sq.mul(dy, tr.data(), u);                              // dp += du t1^T
        sq.add(u, dp);
        sq.mul_transposed(p, dy, u);                           // dt1 = p^T du; dp -= dt1
        for (int64_t e = 0; e < area; ++e) dp[e] -= u[e];
        sq.mul_transposed(a, dp, u);                           // dz += a^T dp
        sq.add(u, dz);
        sq.transpose(z, tr.data());
        sq.mul(dp, tr.data(), u);                              // da += dp z^T
        sq.add(u, da);
        std::memcpy(gz, dz, sizeof(float) * area);
    }
    std::memcpy(dz0, gz, sizeof(float) * area);
}

// --- backward (training): the same passes in reverse, features recomputed rather than stored ------------------

// df/du of a paper map from its value p = f(u): softplus -> sigmoid(u) = 1 - exp(-(p - floor)) (a series where
// that is small, as 1 - exp loses it); sigmoid^2 -> 2 p (1 - sqrt(p)); floored elu + 1 -> min(p, 1) above the floor
inline vl paper_slope(const Spec& s, vl p) {
    if (s.kind == SOFTPLUS) {
        vl a = p - s.floor;
        a = a > 0.0f ? a : vl{};
        vl series = a * (1.0f - a * (0.5f - a * (1.0f / 6)));
        return a < 1e-2f ? series : 1.0f - vexp(-a);
    }
    if (s.kind == SIGMOID2) return 2.0f * p * (1.0f - vsqrt(p));
    return p > s.floor ? (p < 1.0f ? p : same<vl>(1.0f)) : vl{};  // PELU
}

// g_u (rows x m) from g_phi (rows x F) and the features phi (rows x F) of u: favor's and softmaxfeat's exp ->
// g_phi phi; elu + 1 -> g_phi min(phi, 1); sin/cos -> g_sin cos - g_cos sin; cos^2(u + b) -> -g_phi sin(2 (u + b)),
// from u (rows x m, the projection: recomputed, never kept) and the phases of the head whose projection is w
void feature_grad(const Spec& s, const float* phi, const float* g_phi, int rows, float* g_u, const float* u,
                  const float* w) {
    const int m = s.m;
    const float* phase = s.kind == COS2 ? s.phase_of(w) : nullptr;
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < m; c += LANES) {
            if (s.kind == TRIG) {
                const float* p = phi + r * 2 * m;
                const float* g = g_phi + r * 2 * m;
                storel(g_u + r * m + c, loadl(g + c) * loadl(p + m + c) - loadl(g + m + c) * loadl(p + c));
            } else if (s.kind == COS2) {
                vl sn, cs;
                vsincos(loadl(u + r * m + c) + loadl(phase + c), &sn, &cs);
                storel(g_u + r * m + c, loadl(g_phi + r * m + c) * (-2.0f * sn * cs));
            } else {
                vl p = loadl(phi + r * m + c), slope;
                if (s.exp_values()) slope = p;
                else if (s.kind == ELU) slope = p < 1.0f ? p : same<vl>(1.0f);
                else slope = paper_slope(s, p);
                storel(g_u + r * m + c, loadl(g_phi + r * m + c) * slope);
            }
        }
}

// a thread's block scratch for the backward passes (no input normalising there, so no unit-norm buffer)
struct BackwardBuffers {
    Scratch u, phi, g_phi, g_u, rows_dv, row_max, row_a, row_b, row_c;
    BackwardBuffers(const Spec& s, int dv, int rows = block_rows())
        : u(rows * s.m + 16), phi(rows * 2 * s.m + 16), g_phi(rows * 2 * s.m + 16), g_u(rows * s.m + 16),
          rows_dv(rows * dv + 16), row_max(rows + 16), row_a(rows + 16), row_b(rows + 16), row_c(rows + 16) {}
};

// dx (rows x d) = g_u (rows x m) w^T, w^T given as wt (m x d); without a projection dx = g_u
template <int ND>
void input_grad(const Spec& s, const float* g_u, const float* wt, int rows, float* dx) {
    if (wt == nullptr) {
        std::memcpy(dx, g_u, sizeof(float) * rows * s.d);
        return;
    }
    Prefetch none;
    apply<ND>(g_u, s.m, rows, wt, dx, &none);
}

// query pass backward for rows [r0, r1) of one head: out = (e s_kv + off_kv) / guard(e s_ksum + off_den);
// dq, and into the thread's sums g_kv (F x DV) = sum e^T g_num, g_ksum (F) = sum e g_den, g_off (DV + 1); the
// features e are read from kept (the head's, n x F) when the forward kept them, else recomputed
template <int NV, int ND>
void queries_backward_range(const Spec& s, BackwardBuffers& b, const float* x, const float* w, const float* wt,
                            const float* s_kv, const float* s_kv_t, const float* s_ksum, const float* off_kv,
                            float off_den, const float* out, const float* g, int64_t r0, int64_t r1, float eps,
                            float* dq, float* g_kv, float* g_ksum, float* g_off, const float* kept, float* g_wt) {
    constexpr int DV = 16 * NV;
    const int f = s.kind == TRIG ? 2 * s.m : s.m;
    const int rows_max = block_rows();
    float *g_den = b.row_a.data(), *weight = b.row_b.data(), *inv_z = b.row_c.data();
    const float root_m = std::sqrt(static_cast<float>(s.m));
    if (s.l1()) kept = nullptr;  // recomputed: the weighted features take the buffer g_u until the slope is due
    for (int64_t start = r0; start < r1; start += rows_max) {
        const int rows = static_cast<int>(r1 - start < rows_max ? r1 - start : rows_max);
        const float* phi = kept != nullptr ? kept + start * f : b.phi.data();
        if (kept == nullptr) features(s, x + start * s.d, w, rows, b.u.data(), b.phi.data(), b.row_max.data(), nullptr);
        // the paper maps: phi~ = w f, w = sqrt(M) / max(Z, floor) the query's l1 weight; phi~ stands for phi below
        const float* pq = phi;
        if (s.l1()) {
            for (int r = 0; r < rows; ++r) {
                const float z = row_sum(phi + r * f, f);
                weight[r] = root_m / std::max(z, s.floor);
                inv_z[r] = z > s.floor ? 1.0f / z : 0.0f;
                for (int c = 0; c < f; c += 16) store(b.g_u.data() + r * f + c, load(phi + r * f + c) * weight[r]);
            }
            pq = b.g_u.data();
        }
        float* g_num = b.rows_dv.data();
        for (int r = 0; r < rows; ++r) {
            v16 acc = {};
            for (int c = 0; c < f; c += 16) acc += load(pq + r * f + c) * load(s_ksum + c);
            float den = hsum(acc) + off_den;
            const bool clamped = den >= 0 ? den <= eps : den >= -eps;  // the guard's gradient is 0 where it clamps
            den = den >= 0 ? (den > eps ? den : eps) : (den < -eps ? den : -eps);
            const float inv = 1.0f / den;
            v16 dot = {};
            for (int c = 0; c < DV; c += 16) {
                v16 gr = load(g + (start + r) * DV + c);
                store(g_num + r * DV + c, gr * inv);
                dot += gr * load(out + (start + r) * DV + c);
            }
            g_den[r] = clamped ? 0.0f : -hsum(dot) * inv;
        }
        // g_e = g_num s_kv^T + g_den s_ksum^T
        project(g_num, rows, DV, s_kv_t, f, b.g_phi.data());
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < f; c += 16)
                store(b.g_phi.data() + r * f + c, load(b.g_phi.data() + r * f + c) + load(s_ksum + c) * g_den[r]);
        Prefetch none;
        accumulate<NV>(pq, f, rows, g_num, g_kv, &none);
        for (int r = 0; r < rows; ++r) {
            for (int c = 0; c < f; c += 16)
                store(g_ksum + c, load(g_ksum + c) + load(pq + r * f + c) * g_den[r]);
            for (int c = 0; c < DV; c += 16) store(g_off + c, load(g_off + c) + load(g_num + r * DV + c));
            g_off[DV] += g_den[r];
        }
        if (s.l1())  // g_f = w (g_phi~ - (g_phi~ . f) / Z) above the floor, w g_phi~ at it
            for (int r = 0; r < rows; ++r) {
                float* gp = b.g_phi.data() + r * f;
                v16 dot = {};
                for (int c = 0; c < f; c += 16) dot += load(gp + c) * load(phi + r * f + c);
                const float shift = hsum(dot) * inv_z[r];
                for (int c = 0; c < f; c += 16) store(gp + c, (load(gp + c) - shift) * weight[r]);
            }
        feature_grad(s, phi, b.g_phi.data(), rows, b.g_u.data(), b.u.data(), w);
        input_grad<ND>(s, b.g_u.data(), wt, rows, dq + start * s.d);
        if (g_wt != nullptr) accumulate<ND>(b.g_u.data(), s.m, rows, x + start * s.d, g_wt, &none);  // g_u^T x
    }
}

// key pass backward for rows [r0, r1) of one head: kv = sum phi~ v^T, ksum = sum phi~ (phi~ = phi w, w the favor
// row weight exp(row max - norm_coef |k|^2 - log_max), 0 for padding) -> dk, dv from g_kv (F x DV), g_ksum (F);
// phi and the row maxima read from kept, kept_row_max (the head's) when the forward kept them, else recomputed;
// add_v (DV), when given, is added to dv on every real row (the gradient of a sum of the real rows of v)
template <int NV, int ND>
void keys_backward_range(const Spec& s, BackwardBuffers& b, const float* x, const float* vh, const uint8_t* mask,
                         const float* w, const float* wt, float log_max, const float* g_kv, const float* g_kv_t,
                         const float* g_ksum, int64_t r0, int64_t r1, float* dk, float* dv, const float* kept,
                         const float* kept_row_max, const float* add_v, float* g_wt) {
    constexpr int DV = 16 * NV;
    const int f = s.kind == TRIG ? 2 * s.m : s.m;
    const int rows_max = block_rows();
    float *weight = b.row_a.data(), *g_w = b.row_b.data(), *row_max = b.row_max.data(), *inv_z = b.row_c.data();
    const float root_m = std::sqrt(static_cast<float>(s.m));
    for (int64_t start = r0; start < r1; start += rows_max) {
        const int rows = static_cast<int>(r1 - start < rows_max ? r1 - start : rows_max);
        const float* phi = kept != nullptr ? kept + start * f : b.phi.data();
        const float* maxima = kept != nullptr ? kept_row_max + start : row_max;
        if (kept == nullptr) features(s, x + start * s.d, w, rows, b.u.data(), b.phi.data(), row_max, nullptr);
        for (int r = 0; r < rows; ++r) {
            const bool keep = mask == nullptr || mask[start + r];
            float wr = keep ? 1.0f : 0.0f;
            if (keep && s.kind == FAVOR)
                wr = std::exp(maxima[r] - s.norm_coef * squared_norm(x + (start + r) * s.d, s.d) - log_max);
            if (keep && s.l1()) {  // w = sqrt(M) / max(Z, floor), Z = sum f: dw/df = -w / Z above the floor
                const float z = row_sum(phi + r * f, f);
                wr = root_m / std::max(z, s.floor);
                inv_z[r] = z > s.floor ? 1.0f / z : 0.0f;
            }
            weight[r] = wr;
            if (!keep && kept == nullptr) std::memset(b.phi.data() + r * f, 0, sizeof(float) * f);  // kept: zeroed
        }
        // g_phi~ = v g_kv^T + g_ksum; dv = phi~ g_kv (phi~ = phi w: the weight applied to the product's rows)
        project(vh + start * DV, rows, DV, g_kv_t, f, b.g_phi.data());
        Prefetch none;
        apply<NV>(phi, f, rows, g_kv, dv + start * DV, &none);
        for (int r = 0; r < rows; ++r) {
            float* dv_row = dv + (start + r) * DV;
            for (int c = 0; c < DV; c += 16) store(dv_row + c, load(dv_row + c) * weight[r]);
            if (add_v != nullptr && (mask == nullptr || mask[start + r]))
                for (int c = 0; c < DV; c += 16) store(dv_row + c, load(dv_row + c) + load(add_v + c));
            v16 gw = {};
            for (int c = 0; c < f; c += 16) {
                v16 gp = load(b.g_phi.data() + r * f + c) + load(g_ksum + c);
                gw += gp * load(phi + r * f + c);
                store(b.g_phi.data() + r * f + c, gp * weight[r]);  // g_phi = w g_phi~
            }
            g_w[r] = hsum(gw);  // dL/dw = g_phi~ . phi
            if (s.l1() && weight[r] != 0.0f && inv_z[r] != 0.0f) {  // through the l1 normaliser: - w (dL/dw) / Z
                const float shift = weight[r] * g_w[r] * inv_z[r];
                for (int c = 0; c < f; c += 16)
                    store(b.g_phi.data() + r * f + c, load(b.g_phi.data() + r * f + c) - shift);
            }
        }
        feature_grad(s, phi, b.g_phi.data(), rows, b.g_u.data(), b.u.data(), w);
        input_grad<ND>(s, b.g_u.data(), wt, rows, dk + start * s.d);
        if (g_wt != nullptr) accumulate<ND>(b.g_u.data(), s.m, rows, x + start * s.d, g_wt, &none);  // g_u^T k
        if (s.kind == FAVOR)  // through the row weight: dw/dk = w (-2 norm_coef k)
            for (int r = 0; r < rows; ++r) {
                const float a = -2.0f * s.norm_coef * g_w[r] * weight[r];
                const float* xr = x + (start + r) * s.d;
                float* dk_row = dk + (start + r) * s.d;
                for (int c = 0; c < s.d; c += 16) store(dk_row + c, load(dk_row + c) + load(xr + c) * a);
            }
        if (mask != nullptr)
            for (int r = 0; r < rows; ++r)
                if (!mask[start + r]) std::memset(dk + (start + r) * s.d, 0, sizeof(float) * s.d);
    }
}

// finish(bh) runs on head bh's merged sums, in the merge's unit
template <int NV, int ND, typename Finish>
void queries_backward_impl(const Spec& s, const float* q, const float* wt, const float* s_kv, const float* s_kv_t,
                           const float* s_ksum, const float* off_kv, const float* off_den, const float* out,
                           const float* g, int64_t heads, int64_t n, int threads, float eps, float* dq, float* g_kv,
                           float* g_ksum, float* g_off, const float* kept, float* g_wt, const int64_t* ends,
                           Finish&& finish) {
    constexpr int DV = 16 * NV;
    const int f = s.kind == TRIG ? 2 * s.m : s.m;
    const Groups groups(n);
    Partial p(heads * groups.count, f * DV, f, DV + 1, 0, n == 0);
    const int64_t wt_size = g_wt == nullptr ? 0 : static_cast<int64_t>(s.m) * s.d;  // the projection's gradient
    const Slots wt_part(heads * groups.count, wt_size, n == 0);
    const double row_cost = 3.0 * (static_cast<double>(s.d) * (s.w == nullptr ? 1 : s.m) + f * (DV + 1));
    ThreadBuffers<BackwardBuffers> bufs(threads, s, DV);
    parallel_units(threads, heads, n, groups.rows, row_cost, [&](int t, int64_t bh, int64_t r0, int64_t r1) {
        const int64_t at = groups.slot(bh, r0), hw = bh % s.heads_w;
        p.clear(at);
        float* wt_slot = wt_part.clear(at);
        queries_backward_range<NV, ND>(
            s, bufs[t], q + bh * n * s.d, s.w == nullptr ? nullptr : s.w + hw * s.d * s.m,
            wt == nullptr ? nullptr : wt + hw * s.m * s.d, s_kv + bh * f * DV, s_kv_t + bh * DV * f, s_ksum + bh * f,
            off_kv == nullptr ? nullptr : off_kv + bh * DV, off_den == nullptr ? 0.0f : off_den[bh],
            out + bh * n * DV, g + bh * n * DV, r0, real_stop(ends, bh, r0, r1), eps, dq + bh * n * s.d,
            p.state.get() + at * f * DV, p.sums.get() + at * f, p.value_sum.get() + at * (DV + 1),
            kept == nullptr ? nullptr : kept + bh * n * f, g_wt == nullptr ? nullptr : wt_slot);
        zero_rows(dq + bh * n * s.d, s.d, real_stop(ends, bh, r0, r1), r1);  // unread rows: g is 0 there, so is dq
    });
    // the groups' sums in order, a head a unit
    parallel_units(threads, heads, 1, 1, groups.count * (f * (DV + 2.0) + wt_size),
                   [&](int, int64_t bh, int64_t, int64_t) {
        const int64_t first = bh * groups.count;
        sum_slots(p.state.get(), f * DV, first, groups.count, g_kv + bh * f * DV);
        sum_slots(p.sums.get(), f, first, groups.count, g_ksum + bh * f);
        sum_slots(p.value_sum.get(), DV + 1, first, groups.count, g_off + bh * (DV + 1));
        if (g_wt != nullptr) sum_slots(wt_part.data.data(), wt_size, first, groups.count, g_wt + bh * wt_size);
        finish(bh);
    });
}

template <int NV, int ND>
void keys_backward_impl(const Spec& s, const float* k, const float* v, const uint8_t* real, const float* wt,
                        const float* log_max, const float* g_kv, const float* g_kv_t, const float* g_ksum,
                        int64_t heads, int64_t h, int64_t n, int threads, float* dk, float* dv, const float* kept,
                        const float* kept_row_max, const float* add_v, const int64_t* ends, float* g_wt = nullptr) {
    constexpr int DV = 16 * NV;
    const int f = s.kind == TRIG ? 2 * s.m : s.m;
    const double row_cost = 3.0 * (static_cast<double>(s.d) * (s.w == nullptr ? 1 : s.m) + f * (DV + 1));
    // the projection's gradient (heads, m, d) when asked: per group of rows in its slot, merged in order (Groups)
    const Groups groups(n);
    const int64_t wt_size = g_wt == nullptr ? 0 : static_cast<int64_t>(s.m) * s.d;
    const Slots wt_part(g_wt == nullptr ? 0 : heads * groups.count, wt_size, n == 0);
    ThreadBuffers<BackwardBuffers> bufs(threads, s, DV);
    parallel_units(threads, heads, n, g_wt == nullptr ? UNIT_ROWS : groups.rows, row_cost,
                   [&](int t, int64_t bh, int64_t r0, int64_t r1) {
        const int64_t hw = bh % s.heads_w, stop = real_stop(ends, bh, r0, r1);
        float* wt_slot = g_wt == nullptr ? nullptr : wt_part.clear(groups.slot(bh, r0));
        keys_backward_range<NV, ND>(
            s, bufs[t], k + bh * n * s.d, v + bh * n * DV, real == nullptr ? nullptr : real + (bh / h) * n,
            s.w == nullptr ? nullptr : s.w + hw * s.d * s.m, wt == nullptr ? nullptr : wt + hw * s.m * s.d,
            log_max == nullptr ? 0.0f : log_max[bh], g_kv + bh * f * DV, g_kv_t + bh * DV * f, g_ksum + bh * f,
            r0, stop, dk + bh * n * s.d, dv + bh * n * DV,
            kept == nullptr ? nullptr : kept + bh * n * f, kept_row_max == nullptr ? nullptr : kept_row_max + bh * n,
            add_v == nullptr ? nullptr : add_v + bh * DV, wt_slot);
        zero_rows(dk + bh * n * s.d, s.d, stop, r1);  // padding: dk, dv 0
        zero_rows(dv + bh * n * DV, DV, stop, r1);
    });
    if (g_wt != nullptr)
        parallel_units(threads, heads, 1, 1, static_cast<double>(groups.count * wt_size),
                       [&](int, int64_t bh, int64_t, int64_t) {
            sum_slots(wt_part.data.data(), wt_size, bh * groups.count, groups.count, g_wt + bh * wt_size);
        });
}

// Nystromformer's landmark values A (m x DV) = P^T v, P (n x m) the softmax over the keys of each column of u = k w:
// p_jl = exp(u_jl - offset_l), offset_l = the column's max + log of its total (attnbench_softmax_columns). Backward
// for rows [r0, r1) of one head from g_a (m x DV) and c_l = g_a_l . A_l: dv = P g_a, g_u = P (v g_a^T - c),
// dk = g_u w^T, and g_wt (m x d) += g_u^T k, the gradient of w^T; padded rows (mask 0) have P 0: dk, dv 0 there
template <int NV, int ND>
void landmark_values_backward_range(const Spec& s, BackwardBuffers& b, const float* x, const float* vh,
                                    const uint8_t* mask, const float* w, const float* wt, const float* offset,
                                    const float* g_a, const float* g_a_t, const float* c, int64_t r0, int64_t r1,
                                    float* dk, float* dv, float* g_wt) {
    constexpr int DV = 16 * NV;
    const int m = s.m, rows_max = block_rows();
    float *p = b.phi.data(), *g_p = b.g_phi.data(), *g_u = b.g_u.data();
    Prefetch none;
    for (int64_t start = r0; start < r1; start += rows_max) {
        const int rows = static_cast<int>(r1 - start < rows_max ? r1 - start : rows_max);
        project(x + start * s.d, rows, s.d, w, m, p);
        for (int r = 0; r < rows; ++r)
            for (int l = 0; l < m; l += LANES)
                storel(p + r * m + l, mask != nullptr && !mask[start + r] ? vl{}
                                                                          : vexp(loadl(p + r * m + l) - loadl(offset + l)));
        apply<NV>(p, m, rows, g_a, dv + start * DV, &none);
        project(vh + start * DV, rows, DV, g_a_t, m, g_p);
        for (int r = 0; r < rows; ++r)
            for (int l = 0; l < m; l += 16)
                store(g_u + r * m + l, load(p + r * m + l) * (load(g_p + r * m + l) - load(c + l)));
        apply<ND>(g_u, m, rows, wt, dk + start * s.d, &none);
        accumulate<ND>(g_u, m, rows, x + start * s.d, g_wt, &none);
    }
}

template <int NV, int ND>
void landmark_values_backward_impl(const Spec& s, const float* k, const float* v, const uint8_t* real,
                                   const float* wt, const float* offset, const float* g_a, const float* c,
                                   int64_t heads, int64_t h, int64_t n, int threads, float* dk, float* dv,
                                   float* g_wt) {
    constexpr int DV = 16 * NV;
    const int64_t m = s.m, wt_size = m * s.d;
    const Groups groups(n);
    Scratch g_a_t(heads * DV * m);
    const Slots part(heads * groups.count, wt_size, n == 0);
    transpose_heads(g_a, heads, m, DV, threads, g_a_t.data());
    ThreadBuffers<BackwardBuffers> bufs(threads, s, DV);
    parallel_units(threads, heads, n, groups.rows, 3.0 * m * (s.d + DV + 1),
                   [&](int t, int64_t bh, int64_t r0, int64_t r1) {
        landmark_values_backward_range<NV, ND>(s, bufs[t], k + bh * n * s.d, v + bh * n * DV,
                                               real == nullptr ? nullptr : real + (bh / h) * n, s.w + bh * s.d * m,
                                               wt + bh * m * s.d, offset + bh * m, g_a + bh * m * DV,
                                               g_a_t.data() + bh * DV * m, c + bh * m, r0, r1, dk + bh * n * s.d,
                                               dv + bh * n * DV, part.clear(groups.slot(bh, r0)));
    });
    parallel_units(threads, heads, 1, 1, static_cast<double>(groups.count) * wt_size,
                   [&](int, int64_t bh, int64_t, int64_t) {  // the groups' sums in order
        sum_slots(part.data.data(), wt_size, bh * groups.count, groups.count, g_wt + bh * wt_size);
    });
}

// Backward of Nystromformer's query side out = softmax(q w) kv (FAVOR features, sums all ones, no offsets: as
// attnbench_queries computes it): dq, g_kv and g_wt (m x d), the gradient of w^T
template <int NV>
void landmark_queries_backward_impl(const Spec& s, const float* q, const float* wt, const float* kv, const float* out,
                                    const float* g, int64_t heads, int64_t n, int threads, float eps, float* dq,
                                    float* g_kv, float* g_wt) {
    constexpr int DV = 16 * NV;
    const int64_t m = s.m;
    Scratch kv_t(heads * DV * m), ones(heads * m), g_ksum(heads * m), g_off(heads * (DV + 1));
    std::fill_n(ones.data(), heads * m, 1.0f);
    transpose_heads(kv, heads, m, DV, threads, kv_t.data());
    queries_backward_impl<NV, NV>(s, q, wt, kv, kv_t.data(), ones.data(), nullptr, nullptr, out, g, heads, n, threads,
                                  eps, dq, g_kv, g_ksum.data(), g_off.data(), nullptr, g_wt, nullptr, [](int64_t) {});
}

// Backward of attention_impl for d == DV: the query pass's (dq and the gradients of the finished state), the
// finish's (s_kv = scale^2 (kv + offset sum_j v_j), off_kv = offset sum_i s_kv_i, and alike for the sums), then the
// key pass's (dk, dv, with the gradient of sum_j v_j added on every real row); the small steps a head a unit
template <int NV>
void attention_backward_impl(const Spec& s, const float* q, const float* k, const float* v, const uint8_t* real,
                             int64_t heads, int64_t h, int64_t n, int threads, float scale, float offset, float eps,
                             const float* out, const float* g, const Saved& saved, float* dq, float* dk, float* dv,
                             bool skip_queries, float* g_wt) {
    constexpr int DV = 16 * NV;
    const std::vector<int64_t> ends = real_ends(real, heads, h, n);
    const int64_t* key_ends = ends.empty() ? nullptr : ends.data();
    const int64_t f = s.kind == TRIG ? 2 * s.m : s.m, dm = static_cast<int64_t>(s.d) * s.m;
    Scratch wt(s.w == nullptr ? 0 : s.heads_w * dm), state_t(heads * DV * f);
    Scratch g_kv(heads * f * DV), g_ksum(heads * f), g_off(heads * (DV + 1));  // cleared by the query pass's merge
    std::vector<float> g_vsum(heads * DV);
    const float* wt_or_null = s.w == nullptr ? nullptr : wt.data();
    parallel_units(threads, heads, 1, 1, static_cast<double>(dm + f * DV), [&](int, int64_t bh, int64_t, int64_t) {
        if (s.w != nullptr && bh < s.heads_w) transpose_matrix(s.w + bh * dm, s.d, s.m, wt.data() + bh * dm);
        transpose_matrix(saved.s_kv + bh * f * DV, f, DV, state_t.data() + bh * DV * f);
    });
    const float c2 = scale * scale;
    // g_kv = scale^2 (g_s_kv + offset g_off_kv), and alike for the sums; a head in the merge's unit
    auto finish = [&](int64_t bh) {
        float* gk = g_kv.data() + bh * f * DV;
        const float* go = g_off.data() + bh * (DV + 1);
        float* gv = g_vsum.data() + bh * DV;
        for (int64_t i = 0; i < f; ++i) {
            for (int c = 0; c < DV; ++c) {
                gk[i * DV + c] = c2 * (gk[i * DV + c] + offset * go[c]);
                gv[c] += offset * gk[i * DV + c];
            }
            g_ksum[bh * f + i] = c2 * (g_ksum[bh * f + i] + offset * go[DV]);
        }
        transpose_matrix(gk, f, DV, state_t.data() + bh * DV * f);
    };
    queries_backward_impl<NV, NV>(s, q, wt_or_null, saved.s_kv, state_t.data(), saved.s_ksum,
                                  offset != 0.0f ? saved.off_kv : nullptr, offset != 0.0f ? saved.off_den : nullptr,
                                  out, g, heads, n, threads, eps, dq, g_kv.data(), g_ksum.data(), g_off.data(),
                                  s.kind == COS2 ? nullptr : saved.phi_q, g_wt, skip_queries ? key_ends : nullptr,
                                  finish);
    Scratch g_wt_keys(g_wt == nullptr ? 0 : heads * dm);
    keys_backward_impl<NV, NV>(s, k, v, real, wt_or_null, saved.log_max, g_kv.data(), state_t.data(), g_ksum.data(),
                               heads, h, n, threads, dk, dv, s.kind == COS2 ? nullptr : saved.phi_k,
                               s.kind == COS2 ? nullptr : saved.row_max_k,
                               offset != 0.0f ? g_vsum.data() : nullptr, key_ends,
                               g_wt == nullptr ? nullptr : g_wt_keys.data());
    if (g_wt != nullptr)  // the queries' part plus the keys'
        parallel_units(threads, heads, 1, 1, static_cast<double>(dm), [&](int, int64_t bh, int64_t, int64_t) {
            for (int64_t i = 0; i < dm; i += 16)
                store(g_wt + bh * dm + i, load(g_wt + bh * dm + i) + load(g_wt_keys.data() + bh * dm + i));
        });
}

Spec make_spec(int kind, int d, int m, const float* w, int64_t heads_w, float norm_coef, int unit, float unit_eps,
               float floor = 0.0f, float bias = 0.0f, const float* phase = nullptr) {
    return Spec{kind, d, m, w, heads_w, norm_coef, unit, unit_eps, floor, bias, phase};
}

// fn(std::integral_constant<int, NV>) for a value width dv = 16 NV of 16, 32, 64 or 128: 0, or -1 for another width
template <typename Fn>
int by_width(int dv, Fn&& fn) {
    switch (dv) {
        case 16: fn(std::integral_constant<int, 1>{}); return 0;
        case 32: fn(std::integral_constant<int, 2>{}); return 0;
        case 64: fn(std::integral_constant<int, 4>{}); return 0;
        case 128: fn(std::integral_constant<int, 8>{}); return 0;
        default: return -1;
    }
}

// --- dropout: a counter-based random source ------------------------------------------------------------------
// keep element i where hash(i, seed) >= threshold: with lowbias32 (C. Wellons' 32-bit integer hash, a bijection)
// and two keys from the seed, k0 = lowbias32(lo(seed)) and k1 = lowbias32(hi(seed) ^ k0), the draw is
// lowbias32(lowbias32(lo(i) ^ k0) ^ k1 ^ hi(i) * GOLDEN) (lo, hi: the low and high 32 bits; products mod 2^32).
// Each element's draw depends only on (seed, i), so results are the same for any threads and split, and the
// backward recomputes the mask from the seed instead of storing it. harness/dropout.py holds the same function in
// torch operations (the fallback, and the reference the tests compare with).
template <typename U>
inline U lowbias32(U x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

constexpr int64_t DROPOUT_UNIT = 1 << 16;  // elements a unit of work
constexpr uint32_t GOLDEN = 0x9e3779b9u;

// out[i] = hash(i, seed) >= threshold ? x[i] * scale : 0 for i in [0, n)
void dropout_impl(const float* x, int64_t n, uint32_t threshold, float scale, uint64_t seed, int threads,
                  float* out) {
    const uint32_t k0 = lowbias32<uint32_t>(static_cast<uint32_t>(seed));
    const uint32_t k1 = lowbias32<uint32_t>(static_cast<uint32_t>(seed >> 32) ^ k0);
    parallel_units(threads, 1, n, DROPOUT_UNIT, 8.0, [&](int, int64_t, int64_t r0, int64_t r1) {
        vul lanes;
        for (int l = 0; l < LANES; ++l) lanes[l] = l;
        int64_t i = r0;
        for (; i + LANES <= r1; i += LANES) {  // LANES lanes never straddle 2^32: i is a multiple of LANES
            const vul lo = (vul{} + static_cast<uint32_t>(i)) + lanes;
            const vul hi = vul{} + static_cast<uint32_t>(static_cast<uint64_t>(i) >> 32) * GOLDEN;
            const vul h = lowbias32<vul>(lowbias32<vul>(lo ^ k0) ^ k1 ^ hi);
            const vl v = loadl(x + i) * scale;
            storel(out + i, h >= threshold ? v : vl{});
        }
        for (; i < r1; ++i) {
            const uint32_t lo = static_cast<uint32_t>(i);
            const uint32_t hi = static_cast<uint32_t>(static_cast<uint64_t>(i) >> 32) * GOLDEN;
            out[i] = lowbias32<uint32_t>(lowbias32<uint32_t>(lo ^ k0) ^ k1 ^ hi) >= threshold ? x[i] * scale : 0.0f;
        }
    });
}

}  // namespace

extern "C" {

int attnbench_abi() { return ATTNBENCH_ABI; }  // harness/kernels/native/__init__.py ABI

// the kernels' exp of n floats (a multiple of 16), for the accuracy test
void attnbench_exp(const float* x, int64_t n, float* out) {
    for (int64_t i = 0; i + LANES <= n; i += LANES) storel(out + i, vexp(loadl(x + i)));
}

// Dropout of n floats (dropout_impl): elements whose draw falls below `threshold` (of 2^32) become 0, the others are
// scaled by `scale`; on `threads` threads, the same result for any count. Returns 0.
int attnbench_dropout(const float* x, int64_t n, uint32_t threshold, float scale, uint64_t seed, int threads,
                      float* out) {
    dropout_impl(x, n, threshold, scale, seed, threads, out);
    return 0;
}

// Outputs of every row, on `threads` threads: out = (phi kv + offset_kv) / guard(phi ksum + offset_den, eps),
// offsets optional.
// With conv_v: plus the depthwise convolution of conv_v (heads, n, dv) by conv_w (h, conv_size) (struct Conv).
int attnbench_queries(int kind, const float* q, const float* kv, const float* ksum, const float* offset_kv,
                      const float* offset_den, int64_t heads, int64_t n, int d, int dv, int m, const float* w,
                      int64_t heads_w, int unit, float unit_eps, int threads, float eps, float* out,
                      const float* conv_v, const float* conv_w, int conv_size, int64_t h) {
    Spec s = make_spec(kind, d, m, w, heads_w, 0.0f, unit, unit_eps);
    Conv conv{conv_v, conv_w, conv_size, h};
    return by_width(dv, [&](auto nv) {
        using N = decltype(nv);
        queries_impl<N::value>(s, q, kv, ksum, offset_kv, offset_den, heads, n, threads, eps, out, conv);
    });
}

// The whole attention, on `threads` threads (attention_impl): out (heads, n, dv) from q, k (heads, n, d), v (heads,
// n, dv), features phi = scale (f + offset), guard eps. For training, `saved` (8 pointers, struct Saved's order) gets
// what attnbench_attention_backward needs; null for none. skip_queries: query rows past each sequence's last real key
// are never read (the caller packs the outputs), so they are written as 0 (struct real_ends). Returns 0, or -1 for an
// unsupported value width dv.
int attnbench_attention(int kind, const float* q, const float* k, const float* v, const uint8_t* real, int64_t heads,
                        int64_t h, int64_t n, int d, int dv, int m, const float* w, int64_t heads_w, float norm_coef,
                        int unit, float unit_eps, float scale, float offset, float eps, int threads, float* out,
                        float** saved, float floor, float bias, const float* phase, int skip_queries) {
    Spec s = make_spec(kind, d, m, w, heads_w, norm_coef, unit, unit_eps, floor, bias, phase);
    Saved keep;
    if (saved != nullptr)
        keep = Saved{saved[0], saved[1], saved[2], saved[3], saved[4], saved[5], saved[6], saved[7]};
    return by_width(dv, [&](auto nv) {
        using N = decltype(nv);
        attention_impl<N::value>(s, q, k, v, real, heads, h, n, threads, scale, offset, eps, out, keep,
                                 skip_queries != 0);
    });
}

// Gradients of attnbench_attention (no unit normalising, d == dv, a projection taking none): dq, dk, dv from g
// (heads, n, dv), the forward's out and `saved`. Returns 0, or -1 if unsupported.
int attnbench_attention_backward(int kind, const float* q, const float* k, const float* v, const uint8_t* real,
                                 int64_t heads, int64_t h, int64_t n, int d, int dv, int m, const float* w,
                                 int64_t heads_w, float norm_coef, float scale, float offset, float eps, int threads,
                                 const float* out, const float* g, float** saved, float* dq, float* dk, float* dv_out,
                                 float floor, float bias, const float* phase, int skip_queries, float* g_wt) {
    if (d != dv) return -1;
    Spec s = make_spec(kind, d, m, w, heads_w, norm_coef, 0, 0.0f, floor, bias, phase);
    const Saved keep{saved[0], saved[1], saved[2], saved[3], saved[4], saved[5], saved[6], saved[7]};
    return by_width(dv, [&](auto nv) {
        using N = decltype(nv);
        attention_backward_impl<N::value>(s, q, k, v, real, heads, h, n, threads, scale, offset, eps, out, g, keep, dq,
                                          dk, dv_out, skip_queries != 0, g_wt);
    });
}

// Column softmax sums over every row, on `threads` threads (softmax_columns_impl): k (heads, n, d) against
// w (heads_w, d, m), v (heads, n, dv) -> acc (heads, m, dv), total (heads, m), col_max (heads, m). Padded rows
// contribute nothing.
int attnbench_softmax_columns(const float* k, const float* v, const uint8_t* real, int64_t heads, int64_t h,
                              int64_t n, int d, int dv, int m, const float* w, int64_t heads_w, int threads,
                              float* acc, float* total, float* col_max) {
    Spec s = make_spec(FAVOR, d, m, w, heads_w, 0.0f, 0, 0.0f);
    return by_width(dv, [&](auto nv) {
        using N = decltype(nv);
        softmax_columns_impl<N::value>(s, k, v, real, heads, h, n, threads, acc, total, col_max);
    });
}

// Means of equal consecutive segments of q and k (heads, n, d) -> (heads, segments, d) each; d a multiple of 16 and
// segments dividing n. Returns 0.
// The iterative pseudo-inverse's steps for each of `heads` (size x size) matrices a, size a multiple of 16, from the
// start in z (in place); `store`, when given, keeps each step's input and products (heads x iterations x STEP_PARTS
// x area) for attnbench_pinv_backward. Returns 0.
int attnbench_pinv(const float* a, int64_t heads, int size, int iterations, int threads, float* z, float* store) {
    const Square sq(size);
    parallel_units(threads, heads, 1, 1, 4.0 * iterations * sq.area * size, [&](int, int64_t head, int64_t, int64_t) {
        pinv_steps(sq, a + head * sq.area, z + head * sq.area, iterations,
                   store == nullptr ? nullptr : store + head * iterations * STEP_PARTS * sq.area);
    });
    return 0;
}

// Gradients of attnbench_pinv's steps: g (heads x area) -> da, dz0 (heads x area each). Returns 0.
int attnbench_pinv_backward(const float* a, const float* store, const float* g, int64_t heads, int size,
                            int iterations, int threads, float* da, float* dz0) {
    const Square sq(size);
    parallel_units(threads, heads, 1, 1, 8.0 * iterations * sq.area * size, [&](int, int64_t head, int64_t, int64_t) {
        pinv_steps_backward(sq, a + head * sq.area, store + head * iterations * STEP_PARTS * sq.area, g + head * sq.area,
                            iterations, da + head * sq.area, dz0 + head * sq.area);
    });
    return 0;
}

int attnbench_segment_means(const float* q, const float* k, int64_t heads, int64_t n, int d, int64_t segments,
                            int threads, float* q_means, float* k_means) {
    segment_means(q, k, heads, n, d, segments, threads, q_means, k_means);
    return 0;
}

// out (heads, n, dv) = the depthwise convolution of v (heads, n, dv) by w (h, size) along the sequence (struct Conv),
// on `threads` threads; 0, or -1 for an unsupported width dv
int attnbench_sequence_conv(const float* v, const float* w, int64_t heads, int64_t h, int64_t n, int dv, int size,
                            int threads, float* out) {
    Conv conv{v, w, size, h};
    return by_width(dv, [&](auto nv) { conv_impl<decltype(nv)::value>(conv, heads, n, threads, out); });
}

// Nystromformer's landmark values backward (landmark_values_backward_impl) for d == dv: k, v (heads, n, d); real
// (b, n) or null; w (heads, d, m) and wt (heads, m, d) the landmark queries transposed and not; offset, c (heads,
// m); g_a (heads, m, d) -> dk, dv (heads, n, d), g_wt (heads, m, d). 0, or -1 for an unsupported width
int attnbench_landmark_values_backward(const float* k, const float* v, const uint8_t* real, const float* w,
                                       const float* wt, const float* offset, const float* g_a, const float* c,
                                       int64_t heads, int64_t h, int64_t n, int d, int m, int threads, float* dk,
                                       float* dv, float* g_wt) {
    Spec s = make_spec(FAVOR, d, m, w, heads, 0.0f, 0, 0.0f);
    return by_width(d, [&](auto nv) {
        constexpr int NV = decltype(nv)::value;
        landmark_values_backward_impl<NV, NV>(s, k, v, real, wt, offset, g_a, c, heads, h, n, threads, dk, dv, g_wt);
    });
}

// Nystromformer's query side backward (landmark_queries_backward_impl) for d == dv: q, out, g (heads, n, d); w
// (heads, d, m) and wt (heads, m, d); kv (heads, m, d) -> dq (heads, n, d), g_kv (heads, m, d), g_wt (heads, m, d)
int attnbench_landmark_queries_backward(const float* q, const float* w, const float* wt, const float* kv,
                                        const float* out, const float* g, int64_t heads, int64_t n, int d, int m,
                                        int threads, float eps, float* dq, float* g_kv, float* g_wt) {
    Spec s = make_spec(FAVOR, d, m, w, heads, 0.0f, 0, 0.0f);
    return by_width(d, [&](auto nv) {
        landmark_queries_backward_impl<decltype(nv)::value>(s, q, wt, kv, out, g, heads, n, threads, eps, dq, g_kv,
                                                            g_wt);
    });
}

// dw (heads, size): the gradient of sum(g * attnbench_sequence_conv(v, w)) by each sequence's taps, g and v (heads,
// n, dv) (summed over the batch by the caller); 0, or -1 for an unsupported width dv
int attnbench_sequence_conv_weight_grad(const float* g, const float* v, int64_t heads, int64_t n, int dv, int size,
                                        int threads, float* dw) {
    return by_width(dv, [&](auto nv) { conv_weight_grad_impl<decltype(nv)::value>(g, v, heads, n, size, threads, dw); });
}

}  // extern "C"
