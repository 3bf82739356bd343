//! Transcendental functions, built once from basic ops (polynomials) so every backend runs the same code.
//!
//! Every function here is a short, branch-free sequence of the core ops (`fma`, `select`, integer
//! shifts on the bit patterns, …): range reduction, a polynomial, reconstruction, and `select`s for
//! the special values. Nothing is looked up in tables, so the same code vectorises on every backend
//! and fuses into the surrounding kernel. `f32` and `f64` share the structure; polynomial degrees
//! and coefficients are chosen per type when the function is traced.
//!
//! # Accuracy
//!
//! Maximum error measured by `tests/math_ulp.rs` (200k–1M points per function and type, plus a
//! strided sweep over all f32 bit patterns): f32 against the `f64` std function rounded to f32, f64
//! against Rust std / the C library (themselves within about 1 ulp, so f64 figures carry ±1).
//!
//! | function | domain tested | f32 ulp | f64 ulp |
//! |---|---|---|---|
//! | `exp` | [-87, 88] / [-708, 709], and subnormal results | 1 | 1 |
//! | `exp2` | [-126, 127] / [-1022, 1023], and subnormal results | 1 | 1 |
//! | `log` | all positive normals and subnormals | 1 | 1 |
//! | `log2` | all positive normals and subnormals | 2 | 2 |
//! | `sin`, `cos` | [-1e4, 1e4] (also 1 ulp on [-1e5, 1e5]) | 1 | 1 |
//! | `tan` | [-1e4, 1e4] | 3 | 3 |
//! | `asin` / `acos` | [-1, 1] | 2 / 1 | 2 / 1 |
//! | `atan`, `atan2` | all finite (pairs) | 2 | 2 |
//! | `sinh` / `cosh` / `tanh` | all finite | 2 / 1 / 1 | 2 / 2 / 2 |
//! | `erf` | all finite | 1 | 1 |
//! | `pow` | x > 0, any y with a finite result | 1 | 1 |
//!
//! Subnormal results of `exp`/`exp2`/`pow` are rounded once from the approximation (never flushed).
//! `sin`/`cos`/`tan` use a three-part Cody–Waite reduction: accurate to the figures above up to
//! |x| ≈ 1e5 (f32) and much further for f64; beyond that the reduction gradually loses accuracy
//! (there is no Payne–Hanek reduction), and for huge arguments (|x| ≳ 2^22 for f32, 2^51 for f64)
//! `sin`/`cos` only guarantee a value in [-1, 1] (`tan`: a bounded quotient), never garbage.
//!
//! The functions need a fused multiply-add (`Op::Fma`, which every backend provides exactly): the
//! range reductions and `pow`'s double-double logarithm rely on its single rounding. Results are
//! bit-identical on every backend.
//!
//! # Special values
//!
//! IEEE 754 / C99 Annex F results: NaN in → NaN out (except `pow(x, ±0) = 1` and `pow(1, y) = 1`);
//! `exp(+inf) = +inf`, `exp(-inf) = +0`, overflow → +inf, underflow → subnormal or +0;
//! `log(±0) = -inf`, `log(x < 0) = NaN`, `log(+inf) = +inf`; `sin`/`cos`/`tan(±inf) = NaN`;
//! `asin`/`acos(|x| > 1) = NaN`; `atan(±inf) = ±pi/2`; `atan2` follows C99 for zeros and
//! infinities (`atan2(±0, -0) = ±pi`, `atan2(±inf, -inf) = ±3pi/4`, …); `sinh(±inf) = ±inf`,
//! `cosh(±inf) = +inf`, `tanh(±inf) = ±1`, `erf(±inf) = ±1`; odd functions keep the sign of zero.
//! `pow` follows C99 `pow`: `pow(±0, y < 0)` = ±inf for odd integer y else +inf, `pow(±0, y > 0)`
//! = ±0 for odd integer y else +0, `pow(-1, ±inf) = 1`, `pow(x, ±inf)` = 0 or +inf depending on
//! |x| < 1, `pow(±inf, y)` likewise, and `pow(x < 0, y)` = NaN for finite non-integer y, ±|x|^y
//! for integer y (negative when y is odd).

use crate::array::{Array, Bool, Float64, IntoArray};
use crate::ops::select;
use crate::types::Float;
use kiln_core::Scalar;
use std::f64::consts;

// ---------------------------------------------------------------------------------------------
// Polynomial coefficients (weighted minimax fits, derived for this crate with a Remez exchange in
// 60-digit arithmetic, then rounded coefficient by coefficient to the target precision with the
// remaining ones refitted). `*_F32` tables hold values exactly representable as f32.
// Comments give the fitted form, interval and the approximation error in units of 2^-24 / 2^-53.

/// exp: `e^r = 1 + r + r^2 W(r)`, |r| <= ln2/2; error 0.24 (relative to `e^r - 1`).
const EXP_F32: [f64; 5] = [
    0.4999999701976776,
    0.16666539013385773,
    0.04166774824261665,
    0.008367087692022324,
    0.0013837860897183418,
];
/// As `EXP_F32`; error 0.9.
const EXP_F64: [f64; 10] = [
    0.5000000000000006,
    0.16666666666665647,
    0.04166666666656549,
    0.008333333333604002,
    0.0013888888940622355,
    0.0001984126994597772,
    2.48014891454249e-05,
    2.755670659045227e-06,
    2.763398030636583e-07,
    2.540240722143179e-08,
];
/// exp2: `2^r = 1 + r P(r)`, |r| <= 1/2; error 0.09.
const EXP2_F32: [f64; 6] = [
    0.6931472420692444,
    0.24022655189037323,
    0.05550272762775421,
    0.009617065079510212,
    0.0013417704030871391,
    0.0001582502300152555,
];
/// As `EXP2_F32`; error 0.55.
const EXP2_F64: [f64; 11] = [
    0.6931471805599457,
    0.240226506959101,
    0.05550410866478796,
    0.009618129107599016,
    0.0013333558153453744,
    0.00015403530456506017,
    1.5252727627463074e-05,
    1.3215432885485187e-06,
    1.0180477190865549e-07,
    7.0746049180199e-09,
    4.1131771119940007e-10,
];
/// log (f32): `log(1 + f) = f + f^2 V(f)`, f in [sqrt(1/2) - 1, sqrt(2) - 1]; error 0.51.
const LOG_F32: [f64; 8] = [
    -0.49999991059303284,
    0.33333954215049744,
    -0.25001826882362366,
    0.1996196210384369,
    -0.16568437218666077,
    0.14916855096817017,
    -0.14323623478412628,
    0.08759680390357971,
];
/// log (f64): `log(1 + f) = f - h + s (h + z P(z))`, `s = f / (2 + f)`, `z = s^2`, `h = f^2 / 2`;
/// error 0.011.
const LOG_F64: [f64; 7] = [
    0.6666666666666734,
    0.39999999999416935,
    0.28571428741933685,
    0.22222198616117758,
    0.18183562248101928,
    0.15314100381342877,
    0.14795480452444457,
];
/// pow (f64): `log(1 + f) = 2s + (2/3) s^3 + s^5 Q(z)`; error 7e-7 (2^-73).
const LOGQ_F64: [f64; 8] = [
    0.3999999999999998,
    0.28571428571443835,
    0.22222222217791712,
    0.18181818843716369,
    0.15384558448258978,
    0.13336263739225673,
    0.11675795791539954,
    0.119816324218599,
];
/// pow (f32, evaluated in f64): `log(1 + f) = 2s + s z P(z)`; error 266 (2^-45).
const POW_LOG: [f64; 5] = [
    0.6666666667577335,
    0.3999999563103836,
    0.28572108207065916,
    0.221762273893489,
    0.19583609609935332,
];
/// pow (f32, evaluated in f64): `2^r = 1 + r P(r)`, |r| <= 1/2; error 1022 (2^-43).
const POW_EXP2: [f64; 9] = [
    0.6931471805585505,
    0.24022650695813705,
    0.05550410873971357,
    0.009618129159173613,
    0.001333354733132501,
    0.00015403456016514452,
    1.5258489254060002e-05,
    1.325529806691944e-06,
    9.172002396520787e-08,
];
/// `sin r = r + r^3 S(r^2)`, |r| <= 0.9 (pi/4 plus room for the rounding of `x 2/pi`); error 0.004.
const SIN_F32: [f64; 4] = [
    -0.1666666716337204,
    0.008333365432918072,
    -0.0001984643458854407,
    2.760177267191466e-06,
];
/// As `SIN_F32`; error 0.001.
const SIN_F64: [f64; 7] = [
    -0.16666666666666666,
    0.008333333333333096,
    -0.00019841269841063588,
    2.7557319139717545e-06,
    -2.5052090191142792e-08,
    1.6056925980602398e-10,
    -7.523142912494231e-13,
];
/// `cos r = 1 + r^2 C(r^2)`, |r| <= 0.9; error 0.008.
const COS_F32: [f64; 4] = [
    -0.5,
    0.04166661947965622,
    -0.0013886187225580215,
    2.4318827854585834e-05,
];
/// As `COS_F32`; error 2.5e-5.
const COS_F64: [f64; 8] = [
    -0.5,
    0.041666666666666664,
    -0.001388888888888849,
    2.480158730132666e-05,
    -2.755731913811247e-07,
    2.0876741410819464e-09,
    -1.1469184311189818e-11,
    4.6998731867782277e-14,
];
/// `asin x = x + x^3 A(x^2)`, |x| <= 1/2; error 0.081.
const ASIN_F32: [f64; 5] = [
    0.16666752099990845,
    0.074953094124794,
    0.04546915367245674,
    0.02418474107980728,
    0.042158398777246475,
];
/// As `ASIN_F32`; error 0.13.
const ASIN_F64: [f64; 12] = [
    0.16666666666665408,
    0.07500000000337141,
    0.04464285682821853,
    0.03038195914167453,
    0.022371757933793677,
    0.017359706572575608,
    0.013885217151221724,
    0.01216933456060111,
    0.00652743274294022,
    0.019529778756033813,
    -0.01622667197876729,
    0.031913957580896324,
];
/// `atan t = t + t^3 T(t^2)`, |t| <= tan(pi/8); error 0.35.
const ATAN_F32: [f64; 4] = [
    -0.3333294987678528,
    0.1997772753238678,
    -0.1387779861688614,
    0.08053956180810928,
];
/// As `ATAN_F32`; error 0.012.
const ATAN_F64: [f64; 11] = [
    -0.333333333333332,
    0.19999999999953652,
    -0.1428571428019638,
    0.1111111078329864,
    -0.09090897751172225,
    0.07692060086358021,
    -0.06663102582071358,
    0.05847879076643786,
    -0.05039261852498201,
    0.038063572584564845,
    -0.017906248965476282,
];
/// `sinh x = x + x^3 H(x^2)`, |x| <= 1; error 0.40.
const SINH_F32: [f64; 3] = [
    0.1666671633720398,
    0.008330270648002625,
    0.00020373340521473438,
];
/// As `SINH_F32`; error 0.0023.
const SINH_F64: [f64; 7] = [
    0.16666666666666669,
    0.008333333333332912,
    0.0001984126984159341,
    2.7557319106756317e-06,
    2.5052130998842897e-08,
    1.6056659154581892e-10,
    7.776600600701613e-13,
];
/// `tanh x = x + x^3 T(x^2)`, |x| <= 0.55; error 0.019.
const TANH_F32: [f64; 5] = [
    -0.33333316445350647,
    0.13332544267177582,
    -0.0538475476205349,
    0.02105071395635605,
    -0.00624284939840436,
];
/// As `TANH_F32`; error 0.0052.
const TANH_F64: [f64; 11] = [
    -0.333333333333333,
    0.1333333333332658,
    -0.05396825396373662,
    0.02186948838515422,
    -0.008863232589675862,
    0.0035920919087191745,
    -0.0014555420429431683,
    0.0005884411033419973,
    -0.00023337275262678864,
    8.330352053148478e-05,
    -1.9486524382552977e-05,
];
/// `erf x = x + x P(x^2)`, |x| <= 0.875; error 0.24.
const ERF_SMALL_F32: [f64; 6] = [
    0.12837915122509003,
    -0.3761250376701355,
    0.11281921714544296,
    -0.026770485565066338,
    0.004998927935957909,
    -0.0006020491127856076,
];
/// As `ERF_SMALL_F32`, |x| <= 1; error 0.099.
const ERF_SMALL_F64: [f64; 13] = [
    0.1283791670955126,
    -0.37612638903183904,
    0.11283791670957342,
    -0.02686617064496441,
    0.005223977619979195,
    -0.0008548326551157445,
    0.00012055311417230595,
    -1.4925050126384465e-05,
    1.6451386385175654e-06,
    -1.6241390203511074e-07,
    1.3891319767147095e-08,
    -8.297479475942501e-10,
    6.214622386703401e-12,
];
/// `erf x = 1 - exp(G(x))`, x in [0.875, 3.95]; error 0.032 (relative to erf).
const ERF_TAIL_F32: [f64; 7] = [
    -0.00013357515854295343,
    -1.1279361248016357,
    -0.6367372274398804,
    -0.10432752221822739,
    0.022420238703489304,
    -0.0030923013109713793,
    0.00020099739776924253,
];
/// As `ERF_TAIL_F32`, x in [1, 5.95]; error 0.069.
const ERF_TAIL_F64: [f64; 18] = [
    -5.02798778705984e-07,
    -1.1283740899741777,
    -0.6366436258315774,
    -0.10270344581361392,
    0.01899019095456771,
    0.00041061093011744135,
    -0.0019159253855437128,
    0.0007706285934103687,
    -0.00013504108925347047,
    -2.0271291570419748e-05,
    2.282432285499957e-05,
    -8.667724772117532e-06,
    2.13581088120178e-06,
    -3.733268619598162e-07,
    4.6426030075942146e-08,
    -3.934543812979254e-09,
    2.0451213013796137e-10,
    -4.9290345822215455e-12,
];

// ---------------------------------------------------------------------------------------------
// Constants: `*_32` are f32 values (exact), split constants are hi + lo (+ lo2) with the hi part
// the nearest value of the type.

const LN2_HI_32: f64 = 0.6931471824645996;
const LN2_LO_32: f64 = -1.9046542121259336e-09;
const LN2_LO_64: f64 = 2.3190468138462996e-17;
/// fdlibm's split of ln 2: the high part has 32 significant bits, so `e * LN2_HI_FD` is exact.
const LN2_HI_FD: f64 = 0.6931471803691238;
const LN2_LO_FD: f64 = 1.9082149292705877e-10;
const LOG2E_HI_32: f64 = 1.4426950216293335;
const LOG2E_LO_32: f64 = 1.925963033500011e-08;
const LOG2E_LO_64: f64 = 2.0355273740931033e-17;
const PIO2_1_32: f64 = 1.5707963705062866;
const PIO2_2_32: f64 = -4.371138828673793e-08;
const PIO2_3_32: f64 = -1.7151245100058819e-15;
const PIO2_2_64: f64 = 6.123233995736766e-17;
const PIO2_3_64: f64 = -1.4973849048591698e-33;
const PIO2_LO_32: f64 = -4.371138828673793e-08;
const PIO2_LO_64: f64 = 6.123233995736766e-17;
const PIO4_HI_32: f64 = 0.7853981852531433;
const PIO4_LO_32: f64 = -2.1855694143368964e-08;
const PIO4_LO_64: f64 = 3.061616997868383e-17;
const PI_HI_32: f64 = 3.1415927410125732;
const PI_LO_32: f64 = -8.742277657347586e-08;
const PI_LO_64: f64 = 1.2246467991473532e-16;
const TWO_THIRDS_LO: f64 = 3.700743415417188e-17;
const TAN_PI_8: f64 = 0.41421356237309503;
/// Bit patterns of sqrt(1/2).
const SQRT_HALF_BITS_32: i64 = 0x3F35_04F3;
const SQRT_HALF_BITS_64: i64 = 0x3FE6_A09E_667F_3BCD;

// ---------------------------------------------------------------------------------------------
// Trace-time helpers.

fn is_f32<T: Float>() -> bool {
    T::MANTISSA_BITS == 23
}
/// `v` as a `T` literal.
fn k<T: Float>(v: f64) -> T {
    T::from_f64(v)
}
/// The f32 or the f64 value of a per-type constant.
fn kc<T: Float>(v32: f64, v64: f64) -> T {
    T::from_f64(if is_f32::<T>() { v32 } else { v64 })
}
/// An integer literal of the float's bit-pattern type (two's complement, truncated to its width).
fn ki<T: Float>(v: i64) -> T::Int {
    <T::Int as Scalar>::from_bits64(v as u64)
}
/// Per-type coefficient table.
fn tab<'a, T: Float>(c32: &'a [f64], c64: &'a [f64]) -> &'a [f64] {
    if is_f32::<T>() {
        c32
    } else {
        c64
    }
}
/// `c[0] + x (c[1] + x (c[2] + …))` with fused multiply-adds (at least two coefficients).
fn horner<T: Float>(x: &Array<T>, c: &[f64]) -> Array<T> {
    let n = c.len();
    let mut acc = x.fma(k::<T>(c[n - 1]), k::<T>(c[n - 2]));
    for &ci in c[..n - 2].iter().rev() {
        acc = acc.fma(x, k::<T>(ci));
    }
    acc
}
/// `1.5 * 2^mantissa_bits`: adding it rounds to an integer that the low bits of the sum hold.
fn magic<T: Float>() -> T {
    kc::<T>(12_582_912.0, 6_755_399_441_055_744.0)
}
fn exp_bias<T: Float>() -> i64 {
    if is_f32::<T>() {
        127
    } else {
        1023
    }
}
fn width<T: Float>() -> i64 {
    if is_f32::<T>() {
        32
    } else {
        64
    }
}
/// Whether bit `i` of `v` is set (no bitwise `&` on generic integers: shift it into the sign bit).
fn bit<T: Float>(v: &Array<T::Int>, i: i64) -> Bool {
    (v << ki::<T>(width::<T>() - 1 - i)).lt(ki::<T>(0))
}
/// The sign bit (true for -0.0 and negative NaNs too).
fn signbit<T: Float>(x: &Array<T>) -> Bool {
    x.bitcast::<T::Int>().lt(ki::<T>(0))
}
fn neg_where<T: Float>(mask: &Bool, v: Array<T>) -> Array<T> {
    select(mask, -&v, v)
}

/// `x = n ln2 + r` with integer `n` and |r| <= ln2/2 (plus rounding). Returns the bits of the float
/// `M + n` (`M` = [`magic`]), which [`scale2`] and [`pow2i`] turn into powers of two, and `r`.
/// Needs |n| < 2^22; with FMA the first reduction step is exact.
fn exp_reduce<T: Float>(x: &Array<T>) -> (Array<T::Int>, Array<T>) {
    let m = magic::<T>();
    let t = x.fma(k::<T>(consts::LOG2_E), m);
    let n = &t - m;
    let r = n.fma(kc::<T>(-LN2_HI_32, -consts::LN_2), x);
    let r = n.fma(kc::<T>(-LN2_LO_32, -LN2_LO_64), &r);
    (t.bitcast::<T::Int>(), r)
}
/// `e^r` for |r| <= ln2/2.
fn exp_poly<T: Float>(r: &Array<T>) -> Array<T> {
    let w = horner(r, tab::<T>(&EXP_F32, &EXP_F64));
    w.fma(r, k::<T>(1.0)).fma(r, k::<T>(1.0))
}
/// `y * 2^(n + shift)` where `tb` holds the bits of `M + n`. Two multiplications by normal powers
/// of two, so that results from the subnormal range up to overflow are rounded once.
/// Needs -2 * bias < n < 2 * bias.
fn scale2<T: Float>(y: &Array<T>, tb: &Array<T::Int>, shift: i64) -> Array<T> {
    // tb = bits(M) + n, bits(M) is even and bits(M)/2 has no set bit below bit 21 (f32) / 50 (f64):
    // shifted into the exponent field, those bits leave the word.
    let mb = ki::<T>(T::MANTISSA_BITS as i64);
    let bias = exp_bias::<T>();
    let h = tb >> ki::<T>(1); // bits(M)/2 + floor(n/2)
    let n2 = tb - &h; // bits(M)/2 + ceil(n/2)
    let s1 = ((&h + ki::<T>(bias)) << mb).bitcast::<T>();
    let s2 = ((&n2 + ki::<T>(bias + shift)) << mb).bitcast::<T>();
    y * &s1 * &s2
}
/// `2^n` where `tb` holds the bits of `M + n`; needs a normal result.
fn pow2i<T: Float>(tb: &Array<T::Int>) -> Array<T> {
    let mb = ki::<T>(T::MANTISSA_BITS as i64);
    ((tb + ki::<T>(exp_bias::<T>())) << mb).bitcast::<T>()
}
/// `e^x` for moderate `x` (result normal, no clamping).
fn exp_small<T: Float>(x: &Array<T>) -> Array<T> {
    let (tb, r) = exp_reduce(x);
    exp_poly(&r) * pow2i(&tb)
}
/// `e^x - 1` for |x| <= 40 (accurate near 0 too).
fn expm1_small<T: Float>(x: &Array<T>) -> Array<T> {
    let (tb, r) = exp_reduce(x);
    let w = horner(&r, tab::<T>(&EXP_F32, &EXP_F64));
    let em1 = (&r * &r).fma(&w, &r);
    let s = pow2i::<T>(&tb);
    s.fma(&em1, &s - k::<T>(1.0))
}
/// `e^a / 2` for `a >= 0` (or NaN), overflowing to +inf exactly where the result does.
fn exp_half<T: Float>(a: &Array<T>) -> Array<T> {
    let x = a.min(kc::<T>(90.0, 711.5));
    let (tb, r) = exp_reduce(&x);
    scale2(&exp_poly(&r), &tb, -1)
}

/// `x = 2^e (1 + f)` with `f` in [sqrt(1/2) - 1, sqrt(2) - 1) for positive finite `x` (subnormals
/// are scaled first); garbage (but finite) otherwise. Returns `(e, f)`.
fn log_reduce<T: Float>(x: &Array<T>) -> (Array<T>, Array<T>) {
    let (scale, scale_e, half_bits) = if is_f32::<T>() {
        (8_388_608.0, 23.0, SQRT_HALF_BITS_32)
    } else {
        (18_014_398_509_481_984.0, 54.0, SQRT_HALF_BITS_64)
    };
    let tiny = x.lt(kc::<T>(f32::MIN_POSITIVE as f64, f64::MIN_POSITIVE));
    let xs = select(&tiny, x * k::<T>(scale), x);
    let ix = xs.bitcast::<T::Int>();
    let mb = ki::<T>(T::MANTISSA_BITS as i64);
    let e = (&ix - ki::<T>(half_bits)) >> mb;
    let m = (&ix - (&e << mb)).bitcast::<T>();
    let f = &m - k::<T>(1.0);
    let ef = e.cast::<T>() - select(&tiny, k::<T>(scale_e), k::<T>(0.0));
    (ef, f)
}
/// `log(1 + f)` for `f` from [`log_reduce`].
fn log1p_reduced<T: Float>(f: &Array<T>) -> Array<T> {
    if is_f32::<T>() {
        (f * f).fma(horner(f, &LOG_F32), f)
    } else {
        let s = f / (f + k::<T>(2.0));
        let z = &s * &s;
        let r = &z * horner(&z, &LOG_F64);
        let hfsq = f * f * k::<T>(0.5);
        f - (&hfsq - s * (&hfsq + r))
    }
}
/// Results for the inputs outside the domain of `log`/`log2`.
fn log_special<T: Float>(x: &Array<T>, r: Array<T>) -> Array<T> {
    let inf = k::<T>(f64::INFINITY);
    let r = select(&x.eq(inf), inf, r);
    let r = select(&x.eq(k::<T>(0.0)), k::<T>(f64::NEG_INFINITY), r);
    select(&!x.ge(k::<T>(0.0)), k::<T>(f64::NAN), r)
}

/// `x = q pi/2 + r`, |r| <= pi/4 (+ up to |x| 2^-25 from the rounded 2/pi). Returns the bits of
/// `M + q` (whose low bits are `q`'s) and `r`, clamped so that huge arguments stay bounded.
fn trig_reduce<T: Float>(x: &Array<T>) -> (Array<T::Int>, Array<T>) {
    let m = magic::<T>();
    let t = x.fma(k::<T>(consts::FRAC_2_PI), m);
    let q = &t - m;
    // three-part pi/2; with FMA, the first step is exact (q * P1 is exact and so is the difference)
    let r = q.fma(kc::<T>(-PIO2_1_32, -consts::FRAC_PI_2), x);
    let r = q.fma(kc::<T>(-PIO2_2_32, -PIO2_2_64), &r);
    let r = q.fma(kc::<T>(-PIO2_3_32, -PIO2_3_64), &r);
    (t.bitcast::<T::Int>(), r.max(k::<T>(-0.9)).min(k::<T>(0.9)))
}
/// `(sin r, cos r)` for |r| <= 0.9.
fn sin_cos_poly<T: Float>(r: &Array<T>) -> (Array<T>, Array<T>) {
    let z = r * r;
    let s = (r * &z).fma(horner(&z, tab::<T>(&SIN_F32, &SIN_F64)), r);
    let c = z.fma(horner(&z, tab::<T>(&COS_F32, &COS_F64)), k::<T>(1.0));
    (s, c)
}

/// `atan(a / b)` in [0, pi/4] for 0 <= a <= b (b > 0, finite ratio).
fn atan_core<T: Float>(a: &Array<T>, b: &Array<T>) -> Array<T> {
    let mid = a.gt(b * k::<T>(TAN_PI_8));
    let num = select(&mid, a - b, a);
    let den = select(&mid, a + b, b);
    let t = num / den;
    let z = &t * &t;
    let p = (&t * &z).fma(horner(&z, tab::<T>(&ATAN_F32, &ATAN_F64)), &t);
    let p4 = (&p + kc::<T>(PIO4_LO_32, PIO4_LO_64)) + kc::<T>(PIO4_HI_32, consts::FRAC_PI_4);
    select(&mid, p4, p)
}
/// `pi/2 - p` with the constant in two parts.
fn pio2_minus<T: Float>(p: &Array<T>) -> Array<T> {
    (Array::scalar(kc::<T>(PIO2_LO_32, PIO2_LO_64)) - p) + kc::<T>(PIO2_1_32, consts::FRAC_PI_2)
}
/// `pi - p` with the constant in two parts.
fn pi_minus<T: Float>(p: &Array<T>) -> Array<T> {
    (Array::scalar(kc::<T>(PI_LO_32, PI_LO_64)) - p) + kc::<T>(PI_HI_32, consts::PI)
}

impl<T: Float> Array<T> {
    /// `e^x`, elementwise.
    ///
    /// Range reduction `x = n ln2 + r` (|r| <= ln2/2, two-part ln 2), a degree-6 (f32) / 11 (f64)
    /// polynomial, and scaling by `2^n` in two steps so that subnormal results are rounded once.
    /// Overflow gives +inf, underflow +0; `exp(-inf) = 0`, `exp(NaN) = NaN`. About 23 ops (f32).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let y = Float32::from_slice(&[0.0, 1.0, -1.0, 100.0]).exp().to_vec();
    /// assert_eq!(y[0], 1.0);
    /// assert!((y[1] - std::f32::consts::E).abs() <= 1e-6);
    /// assert!((y[2] - 0.36787945).abs() <= 1e-7);
    /// assert_eq!(y[3], f32::INFINITY);
    /// ```
    pub fn exp(&self) -> Array<T> {
        if let Some(y) = crate::ad::rules::unary("exp", self, Self::exp, |x| x.exp()) {
            return y;
        }
        let x = self.max(kc::<T>(-104.0, -746.0)).min(kc::<T>(89.0, 710.0));
        let (tb, r) = exp_reduce(&x);
        scale2(&exp_poly(&r), &tb, 0)
    }

    /// `2^x`, elementwise (exact for integer `x` in range; overflow +inf, underflow +0).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let y = Float64::from_slice(&[3.0, -2.0, 0.5]).exp2().to_vec();
    /// assert_eq!(&y[..2], &[8.0, 0.25]);
    /// assert!((y[2] - std::f64::consts::SQRT_2).abs() <= 1e-15);
    /// ```
    pub fn exp2(&self) -> Array<T> {
        if let Some(y) = crate::ad::rules::unary("exp2", self, Self::exp2, |x| {
            x.exp2() * T::from_f64(std::f64::consts::LN_2)
        }) {
            return y;
        }
        let x = self
            .max(kc::<T>(-152.0, -1080.0))
            .min(kc::<T>(129.0, 1025.0));
        let m = magic::<T>();
        let t = &x + m;
        let n = &t - m;
        let r = &x - &n;
        let p = horner(&r, tab::<T>(&EXP2_F32, &EXP2_F64)).fma(&r, k::<T>(1.0));
        scale2(&p, &t.bitcast::<T::Int>(), 0)
    }

    /// Natural logarithm, elementwise.
    ///
    /// `x = 2^e (1 + f)` with `f` in [sqrt(1/2) - 1, sqrt(2) - 1) read from the bits (subnormals
    /// are scaled first); f32 uses a degree-9 polynomial in `f`, f64 the `s = f / (2 + f)` form.
    /// `log(±0) = -inf`, `log(x < 0) = NaN`, `log(+inf) = +inf`, `log(NaN) = NaN`. About 31 ops
    /// (f32, special cases included).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let y = Float32::from_slice(&[1.0, std::f32::consts::E, 0.0, -1.0]).log().to_vec();
    /// assert_eq!(y[0], 0.0);
    /// assert!((y[1] - 1.0).abs() <= 1e-7);
    /// assert_eq!(y[2], f32::NEG_INFINITY);
    /// assert!(y[3].is_nan());
    /// ```
    pub fn log(&self) -> Array<T> {
        if let Some(y) = crate::ad::rules::unary("log", self, Self::log, |x| x.rcp()) {
            return y;
        }
        let (e, f) = log_reduce(self);
        let y = log1p_reduced(&f);
        let lo = e.fma(kc::<T>(LN2_LO_32, LN2_LO_64), &y);
        let r = e.fma(kc::<T>(LN2_HI_32, consts::LN_2), &lo);
        log_special(self, r)
    }

    /// Base-2 logarithm, elementwise (exact for powers of two; special values as [`Array::log`]).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let y = Float64::from_slice(&[8.0, 0.5, 10.0]).log2().to_vec();
    /// assert_eq!(&y[..2], &[3.0, -1.0]);
    /// assert!((y[2] - 10f64.log2()).abs() <= 1e-15);
    /// ```
    pub fn log2(&self) -> Array<T> {
        if let Some(y) = crate::ad::rules::unary("log2", self, Self::log2, |x| {
            (x * T::from_f64(std::f64::consts::LN_2)).rcp()
        }) {
            return y;
        }
        let (e, f) = log_reduce(self);
        let y = log1p_reduced(&f);
        let lo = y.fma(kc::<T>(LOG2E_LO_32, LOG2E_LO_64), &e);
        let r = y.fma(kc::<T>(LOG2E_HI_32, consts::LOG2_E), &lo);
        log_special(self, r)
    }

    /// Sine (radians), elementwise.
    ///
    /// `x = q pi/2 + r` with a three-part Cody–Waite reduction (FMA), then the sine or cosine
    /// polynomial of `r` by quadrant. Accurate on |x| <= 1e5 (f32) and far beyond for f64; for huge
    /// |x| the result is only bounded (see the module docs). `sin(±inf) = NaN`, `sin(-0) = -0`.
    /// About 27 ops (f32).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let y = Float32::from_slice(&[0.0, std::f32::consts::FRAC_PI_2, 1000.0]).sin().to_vec();
    /// assert_eq!(y[..2], [0.0, 1.0]);
    /// assert!((y[2] - 0.82687956).abs() <= 1e-6);
    /// ```
    pub fn sin(&self) -> Array<T> {
        if let Some(y) = crate::ad::rules::unary("sin", self, Self::sin, |x| x.cos()) {
            return y;
        }
        let (tb, r) = trig_reduce(self);
        let (s, c) = sin_cos_poly(&r);
        let y = select(&bit::<T>(&tb, 0), &c, &s);
        let y = neg_where(&bit::<T>(&tb, 1), y);
        select(&self.eq(k::<T>(0.0)), self, y)
    }

    /// Cosine (radians), elementwise (see [`Array::sin`] for the method and range).
    /// `cos(±inf) = NaN`.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let y = Float64::from_slice(&[0.0, std::f64::consts::PI, 1e4]).cos().to_vec();
    /// assert_eq!(y[..2], [1.0, -1.0]);
    /// assert!((y[2] - 1e4f64.cos()).abs() <= 1e-15);
    /// ```
    pub fn cos(&self) -> Array<T> {
        if let Some(y) = crate::ad::rules::unary("cos", self, Self::cos, |x| -x.sin()) {
            return y;
        }
        let (tb, r) = trig_reduce(self);
        let (s, c) = sin_cos_poly(&r);
        let y = select(&bit::<T>(&tb, 0), &s, &c);
        neg_where(&bit::<T>(&(&tb + ki::<T>(1)), 1), y)
    }

    /// Tangent (radians), elementwise: `sin r / cos r` or `-cos r / sin r` by quadrant (one
    /// division), with the reduction of [`Array::sin`]. `tan(±inf) = NaN`, `tan(-0) = -0`.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let y = Float32::from_slice(&[0.0, std::f32::consts::FRAC_PI_4, -1.0]).tan().to_vec();
    /// assert_eq!(y[0], 0.0);
    /// assert!((y[1] - 1.0).abs() <= 2.5e-7);
    /// assert!((y[2] + 1.5574077).abs() <= 2e-7);
    /// ```
    pub fn tan(&self) -> Array<T> {
        if let Some(y) = crate::ad::rules::unary("tan", self, Self::tan, |x| {
            let c = x.cos();
            (&c * &c).rcp()
        }) {
            return y;
        }
        let (tb, r) = trig_reduce(self);
        let (s, c) = sin_cos_poly(&r);
        let odd = bit::<T>(&tb, 0);
        let num = select(&odd, &c, &s);
        let den = select(&odd, -&s, &c);
        let y = num / den;
        select(&self.eq(k::<T>(0.0)), self, y)
    }

    /// Arcsine, elementwise, in [-pi/2, pi/2]; NaN outside [-1, 1].
    ///
    /// |x| <= 1/2: `x + x^3 A(x^2)`; otherwise `pi/2 - 2 asin(sqrt((1 - |x|) / 2))` (one sqrt).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let y = Float32::from_slice(&[0.0, 1.0, -0.5, 2.0]).asin().to_vec();
    /// assert_eq!(y[..2], [0.0, std::f32::consts::FRAC_PI_2]);
    /// assert!((y[2] + 0.5235988).abs() <= 1e-7);
    /// assert!(y[3].is_nan());
    /// ```
    pub fn asin(&self) -> Array<T> {
        if let Some(y) = crate::ad::rules::unary("asin", self, Self::asin, |x| {
            (Array::scalar(T::one()) - x * x).rsqrt()
        }) {
            return y;
        }
        let (p, big) = asin_parts(self);
        let rb = pio2_minus(&(&p * k::<T>(2.0)));
        let rb = neg_where(&self.lt(k::<T>(0.0)), rb);
        select(&big, rb, p)
    }

    /// Arccosine, elementwise, in [0, pi]; NaN outside [-1, 1].
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let y = Float64::from_slice(&[1.0, -1.0, 0.5]).acos().to_vec();
    /// assert_eq!(y[..2], [0.0, std::f64::consts::PI]);
    /// assert!((y[2] - std::f64::consts::FRAC_PI_3).abs() <= 1e-15);
    /// ```
    pub fn acos(&self) -> Array<T> {
        if let Some(y) = crate::ad::rules::unary("acos", self, Self::acos, |x| {
            -(Array::scalar(T::one()) - x * x).rsqrt()
        }) {
            return y;
        }
        let (p, big) = asin_parts(self);
        let p2 = &p * k::<T>(2.0);
        let rb = select(&self.lt(k::<T>(0.0)), pi_minus(&p2), &p2);
        select(&big, rb, pio2_minus(&p))
    }

    /// Arctangent, elementwise, in [-pi/2, pi/2]; `atan(±inf) = ±pi/2`.
    ///
    /// Reduced to `atan(a / b)` with a <= b, then to |t| <= tan(pi/8) via `(a - b) / (a + b)` (one
    /// division) and a short polynomial.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let y = Float32::from_slice(&[0.0, 1.0, f32::NEG_INFINITY]).atan().to_vec();
    /// assert_eq!(y, vec![0.0, std::f32::consts::FRAC_PI_4, -std::f32::consts::FRAC_PI_2]);
    /// ```
    pub fn atan(&self) -> Array<T> {
        if let Some(y) =
            crate::ad::rules::unary("atan", self, Self::atan, |x| (x * x + T::one()).rcp())
        {
            return y;
        }
        let a = self.abs();
        let one = k::<T>(1.0);
        let p = atan_core(&a.min(one), &a.max(one));
        let p = select(&a.gt(one), pio2_minus(&p), p);
        neg_where(&signbit(self), p)
    }

    /// Four-quadrant arctangent of `self / x` (`self` is y), in [-pi, pi], with the C99 results
    /// for zeros and infinities (`atan2(±0, -0) = ±pi`, `atan2(±inf, +inf) = ±pi/4`, …).
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let y = Float64::from_slice(&[1.0, 1.0, -1.0, 0.0]);
    /// let x = Float64::from_slice(&[1.0, -1.0, -1.0, -1.0]);
    /// let r = y.atan2(&x).to_vec();
    /// let pi = std::f64::consts::PI;
    /// assert_eq!(r, vec![pi / 4.0, 3.0 * pi / 4.0, -3.0 * pi / 4.0, pi]);
    /// ```
    pub fn atan2(&self, x: impl IntoArray<T>) -> Array<T> {
        let x = x.into_array();
        let d = |y: &Array<T>, x: &Array<T>| {
            let r = (x * x + y * y).rcp();
            (x * &r, -(y * &r))
        };
        if let Some(v) = crate::ad::rules::binary("atan2", self, &x, |y, x| y.atan2(x), d) {
            return v;
        }
        let (ay, ax) = (self.abs(), x.abs());
        let a = ay.min(&ax);
        let b = ay.max(&ax);
        let inf = k::<T>(f64::INFINITY);
        // both infinite: ratio 1; both zero: ratio 0; huge: scale so that a + b cannot overflow
        let both_inf = a.eq(inf);
        let a = select(&both_inf, k::<T>(1.0), a);
        let b = select(&both_inf, k::<T>(1.0), b);
        let b = select(&b.eq(k::<T>(0.0)), k::<T>(1.0), b);
        let huge = b.gt(kc::<T>(1e30, 1e300));
        let sc = select(&huge, kc::<T>(2f64.powi(-64), 2f64.powi(-512)), k::<T>(1.0));
        let p = atan_core(&(&a * &sc), &(&b * &sc));
        let p = select(&ay.gt(&ax), pio2_minus(&p), p);
        let p = select(&signbit(&x), pi_minus(&p), p);
        neg_where(&signbit(self), p)
    }

    /// Hyperbolic sine, elementwise: a polynomial for |x| < 1, else `h - 1/(4h)` with `h = e^|x|/2`
    /// (which overflows only where sinh does). `sinh(±inf) = ±inf`.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let y = Float32::from_slice(&[0.0, 1.0, -2.0]).sinh().to_vec();
    /// assert_eq!(y[0], 0.0);
    /// assert!((y[1] - 1.1752012).abs() <= 2e-7);
    /// assert!((y[2] + 3.6268604).abs() <= 1e-6);
    /// ```
    pub fn sinh(&self) -> Array<T> {
        if let Some(y) = crate::ad::rules::unary("sinh", self, Self::sinh, |x| x.cosh()) {
            return y;
        }
        let a = self.abs();
        let z = self * self;
        let small = (self * &z).fma(horner(&z, tab::<T>(&SINH_F32, &SINH_F64)), self);
        let h = exp_half(&a);
        let big = &h - Array::scalar(k::<T>(0.25)) / &h;
        let big = neg_where(&self.lt(k::<T>(0.0)), big);
        select(&a.lt(k::<T>(1.0)), small, big)
    }

    /// Hyperbolic cosine, elementwise: `h + 1/(4h)` with `h = e^|x|/2`. `cosh(±inf) = +inf`.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let y = Float64::from_slice(&[0.0, 1.0]).cosh().to_vec();
    /// assert_eq!(y[0], 1.0);
    /// assert!((y[1] - 1f64.cosh()).abs() <= 1e-15);
    /// ```
    pub fn cosh(&self) -> Array<T> {
        if let Some(y) = crate::ad::rules::unary("cosh", self, Self::cosh, |x| x.sinh()) {
            return y;
        }
        let h = exp_half(&self.abs());
        &h + Array::scalar(k::<T>(0.25)) / &h
    }

    /// Hyperbolic tangent, elementwise: an odd polynomial for |x| < 0.55, else `u / (u + 2)` with
    /// `u = expm1(2x)`; `tanh(±inf) = ±1`.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let y = Float32::from_slice(&[0.0, 0.5, -20.0, f32::INFINITY]).tanh().to_vec();
    /// assert_eq!(y[0], 0.0);
    /// assert!((y[1] - 0.46211717).abs() <= 1e-7);
    /// assert_eq!(y[2..], [-1.0, 1.0]);
    /// ```
    pub fn tanh(&self) -> Array<T> {
        if let Some(y) = crate::ad::rules::unary("tanh", self, Self::tanh, |x| {
            let t = x.tanh();
            Array::scalar(T::one()) - &t * &t
        }) {
            return y;
        }
        let z = self * self;
        let small = (self * &z).fma(horner(&z, tab::<T>(&TANH_F32, &TANH_F64)), self);
        // |x| >= 0.55: on |x|, so that u >= 0 and its error is not amplified
        let a = self.abs();
        let v = a.min(kc::<T>(10.0, 20.0)) * k::<T>(2.0); // tanh(10), tanh(20) round to 1
        let u = expm1_small(&v);
        let big = neg_where(&self.lt(k::<T>(0.0)), &u / (&u + k::<T>(2.0)));
        let y = select(&a.lt(k::<T>(0.55)), small, big);
        select(&self.eq(k::<T>(0.0)), self, y)
    }

    /// Error function, elementwise: `x + x P(x^2)` near 0, `1 - exp(G(|x|))` in the tail.
    /// `erf(±inf) = ±1`.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let y = Float32::from_slice(&[0.0, 0.5, -2.0, 10.0]).erf().to_vec();
    /// assert_eq!(y[0], 0.0);
    /// assert!((y[1] - 0.5204999).abs() <= 1e-7);
    /// assert!((y[2] + 0.9953223).abs() <= 1e-7);
    /// assert_eq!(y[3], 1.0);
    /// ```
    pub fn erf(&self) -> Array<T> {
        if let Some(y) = crate::ad::rules::unary("erf", self, Self::erf, |x| {
            (-(x * x)).exp() * T::from_f64(std::f64::consts::FRAC_2_SQRT_PI)
        }) {
            return y;
        }
        let (t_lo, t_hi) = (kc::<T>(0.875, 1.0), kc::<T>(3.95, 5.95));
        let z = self * self;
        let small = self.fma(horner(&z, tab::<T>(&ERF_SMALL_F32, &ERF_SMALL_F64)), self);
        let a = self.abs();
        let ac = a.max(t_lo).min(t_hi);
        let g = horner(&ac, tab::<T>(&ERF_TAIL_F32, &ERF_TAIL_F64));
        let big = Array::scalar(k::<T>(1.0)) - exp_small(&g);
        let big = neg_where(&self.lt(k::<T>(0.0)), big);
        select(&a.lt(t_lo), small, big)
    }

    /// `self^e`, elementwise, with C99 `pow` special cases (see the module docs): `pow(x, ±0) = 1`,
    /// `pow(1, y) = 1`, `pow(x < 0, non-integer) = NaN`, `pow(x < 0, integer)` signed by parity.
    ///
    /// f32: `2^(y log2|x|)` evaluated in f64 (correct overflow and subnormal underflow after the
    /// final rounding). f64: `exp(y log|x|)` with the logarithm in double-double precision.
    ///
    /// ```
    /// use kiln::prelude::*;
    /// let x = Float32::from_slice(&[2.0, 9.0, -2.0, -8.0, 0.0]);
    /// let y = x.pow(Float32::from_slice(&[10.0, 0.5, 3.0, 1.0 / 3.0, -1.0])).to_vec();
    /// assert_eq!(y[..3], [1024.0, 3.0, -8.0]);
    /// assert!(y[3].is_nan());
    /// assert_eq!(y[4], f32::INFINITY);
    /// assert_eq!(Float64::from(1.5).pow(2.0).item(), 2.25);
    /// ```
    pub fn pow(&self, e: impl IntoArray<T>) -> Array<T> {
        let y = e.into_array();
        let d = |x: &Array<T>, e: &Array<T>| {
            let dx = e * x.pow(e - T::one());
            // JAX's convention: no derivative in the exponent where the base is 0
            let safe = select(&x.eq(T::zero()), Array::scalar(T::one()), x);
            (dx, safe.log() * x.pow(e))
        };
        if let Some(v) = crate::ad::rules::binary("pow", self, &y, |x, e| x.pow(e), d) {
            return v;
        }
        let (x, y) = (self.cast::<f64>(), y.cast::<f64>());
        let core = if is_f32::<T>() {
            pow_core_f32(&x, &y)
        } else {
            pow_core_f64(&x, &y)
        };
        pow_special(&x, &y, core).cast::<T>()
    }
}

/// `(asin(s) for the reduced s, |x| > 1/2)`: small |x|: `p = asin(x)` (signed); big: `p =
/// asin(sqrt((1 - |x|) / 2))` >= 0 (NaN for |x| > 1).
fn asin_parts<T: Float>(x: &Array<T>) -> (Array<T>, Bool) {
    let a = x.abs();
    let big = a.gt(k::<T>(0.5));
    let zb = a.fma(k::<T>(-0.5), k::<T>(0.5));
    let z = select(&big, &zb, x * x);
    let s = select(&big, zb.sqrt(), x);
    let p = (&s * &z).fma(horner(&z, tab::<T>(&ASIN_F32, &ASIN_F64)), &s);
    (p, big)
}

/// `|x|^y` in f64 to about 2^-42 (enough for an f32 result), for finite positive |x| (the f32
/// range: no subnormal handling) and finite y; garbage elsewhere (patched by [`pow_special`]).
fn pow_core_f32(x: &Float64, y: &Float64) -> Float64 {
    let ix = x.abs().bitcast::<i64>();
    let e = (&ix - SQRT_HALF_BITS_64) >> 52i64;
    let m = (&ix - (&e << 52i64)).bitcast::<f64>();
    let f = &m - 1.0;
    let s = &f / (&f + 2.0);
    let z = &s * &s;
    let l = (&s * &z).fma(horner(&z, &POW_LOG), &s * 2.0); // log(1 + f)
    let l2 = l.fma(consts::LOG2_E, e.cast::<f64>());
    let t = (y * l2).max(-200.0).min(200.0);
    let mg = magic::<f64>();
    let tt = &t + mg;
    let r = &t - (&tt - mg);
    let p = horner(&r, &POW_EXP2).fma(&r, 1.0);
    p * pow2i::<f64>(&tt.bitcast::<i64>())
}

/// `|x|^y` in f64 with the logarithm in double-double, so that `y log|x|` carries ~64 significant
/// bits into `exp`; finite positive |x| (subnormals included) and finite y.
fn pow_core_f64(x: &Float64, y: &Float64) -> Float64 {
    // x = 2^e (1 + f), f exact; s = f / (2 + f) as sh + sl
    let (e, f) = log_reduce(&x.abs());
    let d = &f + 2.0;
    let de = (-&d + 2.0) + &f; // d + de == 2 + f exactly
    let inv = d.rcp();
    let sh = &f * &inv;
    let res = (-&sh).fma(&d, &f) - &sh * &de;
    let sl = &res * &inv;
    // (2/3) s^3 in double-double
    let z = &sh * &sh;
    let zl = sh.fma(&sh, -&z);
    let c = &z * &sh;
    let cl = z.fma(&sh, -&c);
    let c_lo = zl.fma(&sh, &cl) + (&z * 3.0) * &sl;
    let t3h = &c * (2.0 / 3.0);
    let t3l = c.fma(2.0 / 3.0, -&t3h);
    let t3l = c_lo.fma(2.0 / 3.0, c.fma(TWO_THIRDS_LO, &t3l));
    // s^5 Q(z)
    let tail = (&c * &z) * horner(&z, &LOGQ_F64);
    // log(1 + f) = 2 sh + t3h + (2 sl + t3l + tail)
    let sh2 = &sh * 2.0;
    let lh = &sh2 + &t3h;
    let ll = (&t3h - (&lh - &sh2)) + (sl.fma(2.0, &t3l) + tail);
    // renormalise (the tail is ~1e-4 of the result)
    let (lh, ll) = {
        let h = &lh + &ll;
        let l = &ll - (&h - &lh);
        (h, l)
    };
    // A = e ln2 + log(1 + f); e * LN2_HI_FD is exact and |e ln2| >= |lh| unless e == 0
    let eh = &e * LN2_HI_FD;
    let ah = &eh + &lh;
    let al = (&lh - (&ah - &eh)) + e.fma(LN2_LO_FD, &ll);
    // t = y * A
    let th = y * &ah;
    let tl = y.fma(&al, y.fma(&ah, -&th));
    // exp(th + tl)
    let thc = th.max(-746.0).min(710.0);
    let (tb, r) = exp_reduce(&thc);
    // |tl| < 1e-6 unless th was clamped, where it must not pull the result back into range
    let r = &r + tl.max(-1e-3).min(1e-3);
    scale2(&exp_poly(&r), &tb, 0)
}

/// The C99 special cases of `pow`, applied to a core result valid for finite positive |x| and
/// finite y.
fn pow_special(x: &Float64, y: &Float64, core: Float64) -> Float64 {
    let inf = f64::INFINITY;
    let ax = x.abs();
    let ay = y.abs();
    let y_int = y.floor().eq(y);
    let half = y * 0.5;
    let y_odd = &y_int & half.floor().ne(&half);
    // zero or infinite base, or infinite exponent: 0 or inf
    let special = ax.eq(0.0) | ax.eq(inf) | ay.eq(inf);
    let big = ax.gt(1.0) ^ y.lt(0.0);
    let r = select(&special, select(&big, inf, 0.0), core);
    let r = select(&(ax.eq(1.0) & ay.eq(inf)), 1.0, r);
    let r = neg_where(&(signbit(x) & y_odd), r);
    let neg_finite = x.lt(0.0) & x.gt(-inf);
    let r = select(&(neg_finite & !y_int), f64::NAN, r);
    let r = select(&(x.ne(x) | y.ne(y)), f64::NAN, r);
    select(&(y.eq(0.0) | x.eq(1.0)), 1.0, r)
}
